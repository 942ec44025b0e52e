// The approval cards: one per pending call. A card's button (approve, edit, reject,
// respond) decides its own call at once, and the others keep waiting; "Approve all"
// approves every call the reader may approve. A card offers only what the gate would
// take from this reader (the snapshot's `awaiting`) and says who the call waits for; a
// spend approval shows the tokens and the mark, with approve and reject. A card that is
// still there after its decision was not applied, and the page says so.

import { api, conversationPath, handleError } from "./api.js";
import { el, expiryText, judgedText, previewBlock, showError } from "./dom.js";
import { mayRemember, reasonMark, remembered, rememberControls } from "./grants.js";
import { loadList, loadSnapshot } from "./refresh.js";
import { $, currentPending, state } from "./state.js";
import { updateWorking } from "./transcript.js";

export function renderCards(pending) {
  const box = $("approvals");
  const cards = $("cards");
  const ids = new Set(pending.map((p) => p.tool_call_id));
  for (const [id, card] of state.cards) {
    if (!ids.has(id)) {
      card.remove();
      state.cards.delete(id);
    }
  }
  let fresh = null;
  for (const p of pending) {
    let card = state.cards.get(p.tool_call_id);
    const view = awaitingOf(p);
    // Built again when what it offers changed (a quorum's approval, new arguments, a
    // new preview).
    const approvals = (p.approvals || []).length;
    const sig = JSON.stringify([p.args_hash, p.preview && p.preview.hash, approvals, view, mayRemember()]);
    if (card && card._parley.sig !== sig) {
      card.remove();
      card = null;
    }
    if (!card) {
      card = buildCard(p, view);
      card._parley.sig = sig;
      state.cards.set(p.tool_call_id, card);
      fresh = fresh || card;
    }
    cards.append(card); // keeps the order of `pending`
  }
  box.hidden = pending.length === 0;
  fitAllArgs();
  const yours = pending.filter((p) => awaitingOf(p).may_approve).length;
  const n = pending.length;
  const calls = n === 1 ? "1 call" : `${n} calls`;
  $("approvals-title").textContent = !yours
    ? `${calls} waiting for others' approval`
    : n === 1
      ? "1 call needs your decision"
      : `${calls} need your decision — each card decides its own call`;
  refreshCards();
  // A call that starts waiting is brought into view (on a phone the page scrolls).
  if (fresh) fresh.scrollIntoView({ block: "nearest" });
}

// The arguments' boxes are as tall as what they hold (wrapped lines included, so
// nothing is cut), up to most of the screen: on each render, and when the page resizes.
export function fitAllArgs() {
  for (const card of state.cards.values()) fitArgs(card);
}

function fitArgs(card) {
  const box = card._parley.textarea;
  if (!box || !box.isConnected) return;
  box.style.height = "auto";
  box.style.height = `${Math.min(box.scrollHeight + 2, Math.round(window.innerHeight * 0.6))}px`;
}

// Who the call waits for and what this reader may do: the gateway's `awaiting` view,
// computed by the gate itself (never its rules again here). A snapshot without it (an
// older gateway) offers everything, as before.
export function awaitingOf(p) {
  const views = (state.snapshot && state.snapshot.awaiting) || null;
  const view = views && views.find((v) => v.tool_call_id === p.tool_call_id);
  if (view) return view;
  return { tool_call_id: p.tool_call_id, may_approve: !views, may_decide: !views, text: "" };
}

export const SPEND_CALL = "parley_continue_spending";

export function buildCard(p, view = awaitingOf(p)) {
  if (p.name === SPEND_CALL) return buildSpendCard(p, view);
  const args = JSON.stringify(p.args ?? {}, null, 2);
  const textarea = el("textarea", {
    class: "args",
    "data-testid": "args",
    spellcheck: "false",
    rows: String(Math.min(12, Math.max(2, args.split("\n").length))),
    "aria-label": `Arguments of ${p.name}`,
  });
  textarea.value = args;
  const argsError = el("div", { class: "field-error", "data-testid": "args-error", hidden: true });
  const editedNote = el("div", {
    class: "hint",
    hidden: true,
    text: "Edited: “Approve” runs the original arguments; “Edit & approve” runs yours.",
  });
  const reason = el("input", {
    type: "text",
    class: "reason",
    "data-testid": "reject-reason",
    placeholder: "Reason for rejecting (optional)",
    maxlength: "2000",
  });
  const approve = el("button", { type: "button", class: "approve", "data-testid": "approve", text: "Approve" });
  const edit = el("button", {
    type: "button",
    class: "edit",
    "data-testid": "edit",
    text: "Edit & approve",
    title: "Run the tool with the arguments in the box above",
  });
  const reject = el("button", { type: "button", class: "reject", "data-testid": "reject", text: "Reject" });
  const answer = el("input", {
    type: "text",
    class: "answer",
    "data-testid": "respond-message",
    placeholder: "Your answer for the model (the tool does not run)",
    maxlength: "8000",
    "aria-label": `Your answer instead of ${p.name}`,
  });
  const respond = el("button", {
    type: "button",
    class: "respond",
    "data-testid": "respond",
    text: "Respond",
    title: "Answer the model yourself: the tool does not run",
  });
  const answerError = el("div", { class: "field-error", "data-testid": "respond-error", hidden: true });
  const expiry = el("span", { class: "expiry", "data-expires-at": p.expires_at || "" });
  expiry.textContent = p.expires_at ? expiryText(p.expires_at) : "";

  // Only what this reader's decision can do is offered: a reviewer rule's requester,
  // or a quorum's reviewer who approved already, reads the call and who it waits for.
  const mayApprove = Boolean(view.may_approve);
  const mayDecide = Boolean(view.may_decide);
  // A reviewer rule decides each of its calls: the gate refuses remember on one.
  const remember = mayApprove && mayRemember() && !p.reviewer_rule ? rememberControls(p) : null;
  textarea.readOnly = !mayApprove;
  const card = el(
    "div",
    {
      class: "card" + (mayApprove ? "" : " not-yours"),
      "data-testid": "approval-card",
      "data-tool-call-id": p.tool_call_id,
    },
    cardHead(mayApprove ? "Approve tool call?" : "Tool call", p.name, expiry),
    p.description ? el("p", { class: "desc", text: p.description }) : null,
    reasonMark(p), // "asked again: …" when a remembered decision no longer holds
    p.judged ? el("p", { class: "small judged", "data-testid": "judged", text: judgedText(p.judged) }) : null,
    p.subagent ? subagentMark(p.subagent) : null,
    (p.approvals_needed || 1) > 1 ? quorumMark(p) : null,
    awaitingMark(view),
    el("label", { class: "small muted", text: mayApprove ? "Arguments (JSON, editable)" : "Arguments" }),
    textarea,
    argsError,
    editedNote,
    p.preview ? previewBlock(p.preview) : null,
    el(
      "div",
      { class: "card-actions" },
      mayApprove ? approve : null,
      mayApprove ? edit : null,
      el("span", { class: "spacer" }),
      mayDecide ? reason : null,
      mayDecide ? reject : null,
    ),
    remember ? remember.row : null,
    mayDecide ? el("div", { class: "card-actions respond-row" }, answer, respond) : null,
    answerError,
  );
  card._parley = {
    p,
    mayApprove,
    args,
    textarea,
    argsError,
    editedNote,
    reason,
    approve,
    edit,
    reject,
    answer,
    respond,
    answerError,
    remember,
  };

  textarea.addEventListener("input", () => {
    fitArgs(card);
    argsError.hidden = true;
    const edited = textarea.value.trim() !== args.trim();
    editedNote.hidden = !edited;
    card.classList.toggle("edited", edited);
  });
  // The card a button sits on decides, whatever the card map holds meanwhile.
  approve.addEventListener("click", () => choose(p.tool_call_id, "approve", card));
  if (remember) remember.button.addEventListener("click", () => choose(p.tool_call_id, "remember", card));
  edit.addEventListener("click", () => choose(p.tool_call_id, "edit", card));
  reject.addEventListener("click", () => choose(p.tool_call_id, "reject", card));
  reason.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      choose(p.tool_call_id, "reject", card);
    }
  });
  respond.addEventListener("click", () => choose(p.tool_call_id, "respond", card));
  answer.addEventListener("input", () => {
    answerError.hidden = true;
  });
  answer.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      choose(p.tool_call_id, "respond", card);
    }
  });
  return card;
}

export function decisionFor(card, action) {
  const ui = card._parley;
  const id = ui.p.tool_call_id;
  if (action === "approve") return approval(ui.p);
  if (action === "remember") return remembered(approval(ui.p), ui.remember && ui.remember.lifetime);
  if (action === "edit") {
    let args;
    try {
      args = JSON.parse(ui.textarea.value);
    } catch (err) {
      ui.argsError.textContent = `Not valid JSON: ${err.message}`;
      ui.argsError.hidden = false;
      ui.textarea.focus();
      return null;
    }
    if (args === null || typeof args !== "object" || Array.isArray(args)) {
      ui.argsError.textContent = "The arguments must be a JSON object, like {\"key\": \"value\"}.";
      ui.argsError.hidden = false;
      ui.textarea.focus();
      return null;
    }
    ui.argsError.hidden = true;
    return { tool_call_id: id, action: "edit", args };
  }
  if (action === "respond") {
    const message = ui.answer.value.trim();
    if (!message) {
      ui.answerError.textContent = "Write the answer the model should read instead of the tool's result.";
      ui.answerError.hidden = false;
      ui.answer.focus();
      return null;
    }
    ui.answerError.hidden = true;
    return { tool_call_id: id, action: "respond", message };
  }
  const decision = { tool_call_id: id, action: "reject" };
  const reason = ui.reason ? ui.reason.value.trim() : "";
  if (reason) decision.message = reason;
  return decision;
}

export function choose(toolCallId, action, card) {
  if (!card) return;
  // Check the arguments first: a mistake is shown even if a request is in flight.
  const decision = decisionFor(card, action);
  if (!decision || state.busy) return;
  submitDecisions([decision]);
}

export function approveAll() {
  if (state.busy) return;
  submitDecisions(currentPending().filter((p) => awaitingOf(p).may_approve).map(approval));
}

export function refreshCards() {
  const pending = currentPending();
  for (const card of state.cards.values()) {
    const ui = card._parley;
    const more = ui.remember ? [ui.remember.button, ui.remember.lifetime] : [];
    for (const b of [ui.approve, ui.edit, ui.reject, ui.respond, ...more]) if (b) b.disabled = state.busy;
    if (ui.textarea) ui.textarea.readOnly = state.busy || !ui.mayApprove;
    if (ui.reason) ui.reason.disabled = state.busy;
    if (ui.answer) ui.answer.disabled = state.busy;
  }
  const approveAllButton = $("approve-all");
  approveAllButton.hidden = pending.filter((p) => awaitingOf(p).may_approve).length < 2;
  approveAllButton.disabled = state.busy;
  $("approvals").classList.toggle("busy", state.busy);
}

export async function submitDecisions(decisions) {
  const sid = state.sid;
  if (!sid || state.busy) return;
  setBusy(true);
  try {
    const asked = new Map(currentPending().map((p) => [p.tool_call_id, p]));
    const turn = await api("POST", `${conversationPath(sid)}/decisions`, { decisions });
    if (state.sid === sid && turn) {
      if (turn.status === "failed") showError(`The turn failed: ${turn.error || "no detail"}`);
      const left = decisions.filter((d) => leftWaiting(asked.get(d.tool_call_id), turn));
      if (left.length) {
        const ids = left.map((d) => d.tool_call_id).join(", ");
        showError(`Not decided: ${ids} still waits; the decision was refused on the way (see the audit log).`);
      }
    }
  } catch (err) {
    handleError(err);
  } finally {
    setBusy(false);
    if (state.sid === sid) {
      await loadSnapshot();
      loadList();
    }
  }
}

export function setBusy(busy) {
  state.busy = busy;
  refreshCards();
  updateWorking();
}

export function tickExpiries() {
  for (const node of document.querySelectorAll(".expiry[data-expires-at]")) {
    if (node.dataset.expiresAt) node.textContent = expiryText(node.dataset.expiresAt);
  }
}

// "asked by subagent <name>": the call was made in a subagent's conversation (its
// session id in the tooltip); deciding it here passes the decision on to it.
function subagentMark(subagent) {
  return el(
    "p",
    {
      class: "subagent-mark",
      "data-testid": "subagent",
      "data-subagent-session": subagent.session_id || "",
      title: subagent.session_id ? `in conversation ${subagent.session_id}` : null,
    },
    "asked by subagent ",
    el("strong", { text: subagent.name || "?" }),
  );
}

function cardHead(kicker, title, expiry) {
  return el(
    "div",
    { class: "card-head" },
    el("span", { class: "card-kicker", text: kicker }),
    el("span", { class: "tool-name big", "data-testid": "card-title", text: title }),
    expiry,
  );
}

// "waiting for 1 more reviewer: bob or carol" (the gateway's words).
function awaitingMark(view) {
  if (!view.text) return null;
  return el("p", { class: "small awaiting-mark", "data-testid": "awaiting", text: view.text });
}

// The spend approval: not a tool, the question whether the conversation may go on
// spending tokens past its mark. Approve or reject, nothing else (the gate takes no
// other answer).
function buildSpendCard(p, view) {
  const args = p.args || {};
  const expiry = el("span", { class: "expiry", "data-expires-at": p.expires_at || "" });
  expiry.textContent = p.expires_at ? expiryText(p.expires_at) : "";
  const tokens = (n) => (Number.isFinite(n) ? n.toLocaleString("en-US") : "?");
  const approve = el("button", { type: "button", class: "approve", "data-testid": "approve", text: "Approve: go on" });
  const reject = el("button", { type: "button", class: "reject", "data-testid": "reject", text: "Reject: stop" });
  const mayApprove = Boolean(view.may_approve);
  const card = el(
    "div",
    { class: "card spend", "data-testid": "approval-card", "data-tool-call-id": p.tool_call_id, "data-kind": "spend" },
    cardHead("Spend approval", "Go on spending?", expiry),
    el(
      "p",
      { class: "spend-figures", "data-testid": "spend" },
      el("span", {}, "Tokens so far: ", el("strong", { text: tokens(args.total_tokens) })),
      el("span", {}, "Mark: ", el("strong", { text: tokens(args.mark) })),
    ),
    p.description ? el("p", { class: "desc", text: p.description }) : null,
    p.subagent ? subagentMark(p.subagent) : null,
    awaitingMark(view),
    el(
      "div",
      { class: "card-actions" },
      mayApprove ? approve : null,
      el("span", { class: "spacer" }),
      view.may_decide ? reject : null,
    ),
  );
  card._parley = { p, mayApprove, approve, reject };
  approve.addEventListener("click", () => choose(p.tool_call_id, "approve", card));
  reject.addEventListener("click", () => choose(p.tool_call_id, "reject", card));
  return card;
}

// "1 of 2 approvals: bob": a rule's quorum, and who has approved these arguments.
export function quorumText(call) {
  const given = (call.approvals || []).map((a) => a.by);
  const count = `${given.length} of ${call.approvals_needed} approvals`;
  return given.length ? `${count}: ${given.join(", ")}` : `${count} (reviewers other than the requester)`;
}

function quorumMark(call) {
  return el("p", { class: "small quorum", "data-testid": "approvals", text: quorumText(call) });
}

// The decision on `call` left it waiting just as it was: nothing of it was applied
// (TurnResult.left_waiting on the server's side).
function leftWaiting(call, turn) {
  if (!call) return false;
  const now = (turn.pending || []).find((p) => p.tool_call_id === call.tool_call_id);
  return Boolean(
    now && now.args_hash === call.args_hash && (now.approvals || []).length === (call.approvals || []).length,
  );
}

// An approval names the arguments it was given for (args_hash): a call whose arguments
// changed since (an edit, under a quorum) is never approved by an old click. And the
// preview the card shows (preview_hash): one that changed since refuses it.
function approval(p) {
  const decision = { tool_call_id: p.tool_call_id, action: "approve" };
  if (p.args_hash) decision.args_hash = p.args_hash;
  if (p.preview && p.preview.hash) decision.preview_hash = p.preview.hash;
  return decision;
}
