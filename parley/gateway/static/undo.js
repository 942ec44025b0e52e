// The undo window: an approved call whose rule gives it one (`undo_seconds`) waits in
// the snapshot's `scheduled` until it runs. Each shows as a card, "runs in 25 s — Undo",
// whose countdown ticks each second and whose Undo button takes the call back (POST
// …/calls/{id}/undo; the approver or the owner may). The page learns of it as of pending
// calls: the event stream's CUSTOM `parley.call_scheduled` makes it read the snapshot
// again. The decision's own request answers only after the window, so the button works
// while it is in flight. Once the call was undone or ran, its card shows the outcome
// (the call's result, as the transcript shows it) until the reader dismisses it.

import { api, conversationPath, handleError } from "./api.js";
import { el } from "./dom.js";
import { loadSnapshot } from "./refresh.js";
import { $, state } from "./state.js";
import { renderMessage } from "./transcript.js";

const TICK_MS = 1000;
const cards = new Map(); // tool_call_id -> card element, of the conversation `shownFor`
let shownFor = null;
let ticker = null;

// Seconds left until `runsAt` (an ISO instant), never below 0.
export function secondsLeft(runsAt, now = Date.now()) {
  const at = Date.parse(runsAt);
  return Number.isNaN(at) ? 0 : Math.max(0, Math.ceil((at - now) / 1000));
}

export function countdownText(runsAt, now = Date.now()) {
  const left = secondsLeft(runsAt, now);
  return left > 0 ? `runs in ${left} s` : "runs now…";
}

export function renderScheduled(snap) {
  if (shownFor !== state.sid) {
    for (const card of cards.values()) card.remove();
    cards.clear();
    shownFor = state.sid;
  }
  const box = $("scheduled");
  const waiting = (snap && snap.scheduled) || [];
  const ids = new Set(waiting.map((s) => s.tool_call_id));
  for (const s of waiting) {
    let card = cards.get(s.tool_call_id);
    if (!card || card.dataset.state !== "waiting") {
      if (card) card.remove();
      card = buildCard(s);
      cards.set(s.tool_call_id, card);
      box.append(card);
    }
    updateWaiting(card, s, snap);
  }
  for (const [id, card] of cards) {
    const left = !ids.has(id) && card.dataset.state === "waiting";
    if (left || card.dataset.state === "running") showOutcome(card, snap);
  }
  box.hidden = cards.size === 0;
  tick();
  clearInterval(ticker);
  ticker = [...cards.values()].some((c) => c.dataset.state === "waiting") ? setInterval(tick, TICK_MS) : null;
}

// Each waiting card's countdown, from its `runs_at`.
function tick() {
  for (const card of cards.values()) {
    if (card.dataset.state !== "waiting" || card._parley.undoneBy) continue;
    card._parley.countdown.textContent = countdownText(card.dataset.runsAt);
  }
}

function buildCard(s) {
  const countdown = el("span", { class: "countdown", "data-testid": "countdown" });
  const undo = el("button", {
    type: "button",
    class: "reject undo",
    "data-testid": "undo",
    text: "Undo",
    title: "Take the approval back: the call never runs, and the model is told",
  });
  const note = el("p", { class: "small muted undo-note", "data-testid": "undo-note" });
  const outcome = el("div", { class: "undo-outcome", "data-testid": "undo-outcome", hidden: true });
  const dismiss = el("button", { type: "button", class: "link-button", "data-testid": "dismiss", text: "Dismiss" });
  const dismissRow = el("div", { class: "card-actions", hidden: true }, el("span", { class: "spacer" }), dismiss);
  const card = el(
    "div",
    {
      class: "card scheduled-card",
      "data-testid": "scheduled-card",
      "data-tool-call-id": s.tool_call_id,
      "data-state": "waiting",
      "data-runs-at": s.runs_at,
    },
    el(
      "div",
      { class: "card-head" },
      el("span", { class: "card-kicker", text: "Approved, runs soon" }),
      el("span", { class: "tool-name big", "data-testid": "card-title", text: s.name }),
    ),
    el("div", { class: "card-actions undo-row" }, countdown, el("span", { class: "dash", text: "—" }), undo),
    note,
    outcome,
    dismissRow,
  );
  card._parley = { countdown, undo, note, outcome, dismissRow, undoneBy: null };
  undo.addEventListener("click", () => undoCall(card, s.tool_call_id));
  dismiss.addEventListener("click", () => {
    card.remove();
    cards.delete(s.tool_call_id);
    $("scheduled").hidden = cards.size === 0;
  });
  return card;
}

// Only the call's approvers (a quorum's all) or the conversation's owner may undo it (the
// workflow checks; before /v1/me has answered the button is offered, and a refusal says why).
function mayUndo(s, snap) {
  const approvers = [s.approved_by, ...(s.approvers || [])];
  return !state.userId || approvers.includes(state.userId) || state.userId === (snap && snap.user_id);
}

function updateWaiting(card, s, snap) {
  const ui = card._parley;
  const allowed = mayUndo(s, snap);
  card.dataset.runsAt = s.runs_at;
  ui.undoneBy = s.undone_by || null;
  ui.note.textContent = ui.undoneBy
    ? `Undone by ${ui.undoneBy}: it will not run.`
    : allowed
      ? `Approved by ${s.approved_by}; the approver or the conversation's owner may undo it until then.`
      : `Approved by ${s.approved_by}; only they or the conversation's owner may undo it.`;
  ui.undo.hidden = Boolean(ui.undoneBy) || !allowed;
  if (ui.undoneBy) ui.countdown.textContent = "undone";
}

async function undoCall(card, toolCallId) {
  const sid = state.sid;
  const ui = card._parley;
  ui.undo.disabled = true;
  try {
    const path = `${conversationPath(sid)}/calls/${encodeURIComponent(toolCallId)}/undo`;
    const done = await api("POST", path);
    if (done && (done.undone || []).includes(toolCallId)) {
      ui.undoneBy = "you";
      ui.countdown.textContent = "undone";
      ui.note.textContent = "Undone: it will not run, and the model is told.";
      ui.undo.hidden = true;
    }
  } catch (err) {
    handleError(err);
    ui.undo.disabled = false;
  } finally {
    if (state.sid === sid) loadSnapshot();
  }
}

// The call left its window: the card shows what became of it, read from the transcript
// (its result); until the result is there, that it is on its way.
function showOutcome(card, snap) {
  const ui = card._parley;
  const id = card.dataset.toolCallId;
  const messages = (snap && snap.transcript) || [];
  const result = messages.find((m) => m && m.type === "tool" && m.tool_call_id === id);
  ui.undo.hidden = true;
  card.querySelector(".undo-row").hidden = true;
  if (!result) {
    card.dataset.state = "running";
    ui.note.textContent = ui.undoneBy ? "Undone: the model is told." : "Its window is over: it runs now…";
    return;
  }
  const artifact = result.artifact && typeof result.artifact === "object" ? result.artifact : {};
  const undone = Boolean(artifact.payload && artifact.payload.decision === "undo");
  card.dataset.state = undone ? "undone" : "ran";
  card.classList.add(undone ? "was-undone" : "has-run");
  card.querySelector(".card-kicker").textContent = undone ? "Undone" : "Ran";
  ui.note.textContent = undone ? "Undone: the call did not run, and the model was told." : "Its window ended: the call ran.";
  ui.outcome.replaceChildren(...renderMessage(result, new Map(), null, null));
  ui.outcome.hidden = false;
  ui.dismissRow.hidden = false;
}
