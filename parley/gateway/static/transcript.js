// The chat view's parts that need no other view: the status badge, the working
// indicator and the transcript (with "Revert" under a result whose tool declares an
// inverse: POST …/calls/{id}/revert, whose proposal then waits as any pending call).

import { api, conversationPath, errorOf, handleError } from "./api.js";
import { compactJSON, el, judgedText, statusText, textOf } from "./dom.js";
import { emit, EVENTS } from "./events.js";
import { loadSnapshot } from "./refresh.js";
import { $, isEnded, state } from "./state.js";

export function setStatus(status) {
  const badge = $("status");
  const shown = status || "new";
  badge.textContent = statusText(shown);
  badge.dataset.status = shown;
  badge.className = `badge status-${shown}`;
}

export function updateWorking() {
  const snapRunning = state.snapshot && state.snapshot.status === "running";
  const on = state.running || state.busy || Boolean(snapRunning);
  $("working").hidden = !on;
  $("working-text").textContent = state.running ? state.workingLabel : "working…";
  $("send").disabled = state.busy || isEnded(state.snapshot);
}

// The transcript keeps its last message in view while the reader is there: when the
// approval panel opens below it and takes part of its height, as when messages arrive.
// A reader who scrolled up stays where they are.
let pinned = true;
// The height the transcript had when last laid out: a scroll event that comes with a
// resize (the panel opening shrinks the box, its scrollTop unchanged) is judged by the
// height the reader saw, so it does not unpin the transcript before it is re-scrolled.
let seenHeight = 0;
const nearBottom = (box, height = box.clientHeight) =>
  box.scrollHeight - box.scrollTop - height < 60;
// Where the page itself last scrolled the transcript to. Its scroll event comes a frame
// later, and a streaming reply may have grown the transcript meanwhile: that event is
// the page's own, not a reader scrolling up, so it never unpins.
let scrolledTo = null;
const scrollToBottom = (box) => {
  box.scrollTop = box.scrollHeight;
  scrolledTo = box.scrollTop;
};
// A reader's scroll whose event has not come yet: the box is no longer where the page
// left it. A redraw in that frame leaves it there, as the event will.
const scrolledByReader = (box) => scrolledTo !== null && Math.abs(box.scrollTop - scrolledTo) >= 2;
const stayPinned = (box) => pinned && !scrolledByReader(box);

export function keepTranscriptInView() {
  const box = $("transcript");
  seenHeight = box.clientHeight;
  box.addEventListener("scroll", () => {
    if (scrolledTo !== null && !scrolledByReader(box)) return; // the page's own scroll
    scrolledTo = null;
    pinned = nearBottom(box, seenHeight || box.clientHeight);
  });
  new ResizeObserver(() => {
    seenHeight = box.clientHeight;
    if (stayPinned(box)) scrollToBottom(box);
  }).observe(box);
}

// toBottom: the reader just sent a message and should see it; otherwise a reader who
// scrolled up stays where they are, whatever redraws meanwhile.
export function renderTranscript({ toBottom = false } = {}) {
  const box = $("transcript");
  const atBottom = stayPinned(box) || nearBottom(box);
  const open = new Set(
    Array.from(box.querySelectorAll("details[open][data-tool-call-id]"), (d) => d.dataset.toolCallId),
  );
  const closed = new Set(
    Array.from(box.querySelectorAll("details:not([open])[data-tool-call-id]"), (d) => d.dataset.toolCallId),
  );
  const snap = state.snapshot;
  const messages = (snap && snap.transcript) || [];
  const nodes = [];
  if (snap && snap.transcript_offset > 0) {
    nodes.push(
      el("p", {
        class: "muted center small",
        text: `${snap.transcript_offset} earlier message(s) not shown`,
      }),
    );
  }
  const ids = new Set();
  const resultIds = new Set();
  const names = new Map();
  for (const m of messages) {
    if (m && m.id) ids.add(m.id);
    if (m && m.type === "tool" && m.tool_call_id) resultIds.add(m.tool_call_id);
    for (const call of (m && m.tool_calls) || []) names.set(call.id, call.name);
  }
  // "Try again from here" on a user message: rewinds to just before it (only when a
  // rewind can be taken: at rest, nothing owed, open; never on the very first message).
  const base = (snap && snap.transcript_offset) || 0;
  const retry = snap && !isEnded(snap) && !(snap.pending || []).length && !state.busy && !state.running;
  messages.forEach((m, i) => {
    const out = renderMessage(m, names, open, closed);
    if (retry && m && m.type === "human" && base + i > 0 && out.length) {
      out[0].append(retryButton(base + i, textOf(m.content)));
    }
    nodes.push(...out);
    // Revert is offered at rest too (the workflow refuses it while calls wait or a turn
    // runs). Whoever reads the transcript is the owner or a reviewer: both may revert.
    if (retry && revertible(m, snap)) nodes.push(revertLine(m.tool_call_id, m.name));
  });

  // What the event stream has shown and the snapshot does not have yet.
  const pending = state.pendingText;
  if (pending && (snap ? snap.session_id === state.sid : true) && countHumans(messages) <= pending.humans) {
    nodes.push(bubble("human", pending.text, "sending"));
  }
  for (const [id, info] of state.liveResults) {
    if (!resultIds.has(id)) nodes.push(liveResult(id, info));
  }
  const recentTexts = new Set(
    messages.slice(-8).filter((m) => m && m.type === "ai").map((m) => textOf(m.content)),
  );
  for (const [id, text] of state.live) {
    if (text && !ids.has(id) && !recentTexts.has(text)) nodes.push(bubble("ai", text, "streaming"));
  }
  if (snap && snap.last_turn && snap.last_turn.status === "failed" && snap.status === "failed") {
    nodes.push(
      el(
        "div",
        { class: "turn-failed", "data-testid": "turn-failed" },
        el("strong", { text: "The turn failed. " }),
        snap.last_turn.error || "",
      ),
    );
  }
  if (isEnded(snap)) {
    nodes.push(
      el("p", {
        class: "ended-note",
        "data-testid": "ended-note",
        text: "This conversation has ended: nothing more runs in it, and no call waits for a decision.",
      }),
    );
  }
  if (!nodes.length) {
    nodes.push(
      el("p", {
        class: "muted center",
        text: snap ? "No messages yet." : "A new conversation: send a message to start it.",
      }),
    );
  }
  box.replaceChildren(...nodes);
  if (atBottom || toBottom) scrollToBottom(box);
}

function retryButton(index, text) {
  const button = el("button", {
    type: "button",
    class: "retry",
    "data-testid": "try-again",
    title: "Rewind the conversation to just before this message and put it back in the box",
    text: "try again from here",
  });
  button.addEventListener("click", () => emit(EVENTS.RETRY, index, text));
  return button;
}

// A result whose call the workflow says a revert would take (the snapshot's
// `revertible`: it ran and succeeded here, not in a fork's origin, its tool declares an
// inverse, and it was not reverted yet); the workflow's answer, never guessed here.
function revertible(m, snap) {
  if (!m || m.type !== "tool" || !m.tool_call_id) return false;
  return Boolean(snap && Array.isArray(snap.revertible) && snap.revertible.includes(m.tool_call_id));
}

function revertLine(toolCallId, name) {
  const button = el("button", {
    type: "button",
    class: "link-button revert",
    "data-testid": "revert",
    "data-tool-call-id": toolCallId,
    title: `Propose the inverse of this ${name || "call"}: it waits for its own approval`,
    text: "Revert",
  });
  button.addEventListener("click", () => revertCall(button, toolCallId));
  return el("p", { class: "muted small revert-line" }, button);
}

async function revertCall(button, toolCallId) {
  const sid = state.sid;
  button.disabled = true;
  try {
    await api("POST", `${conversationPath(sid)}/calls/${encodeURIComponent(toolCallId)}/revert`);
  } catch (err) {
    handleError(err);
    button.disabled = false;
  } finally {
    if (state.sid === sid) loadSnapshot(); // the inverse's approval card, as any pending call
  }
}

export const countHumans = (messages) => messages.filter((m) => m && m.type === "human").length;

export function bubble(type, text, extra) {
  const who = type === "human" ? "You" : "Agent";
  return el(
    "div",
    { class: `msg ${type}${extra ? " " + extra : ""}`, "data-type": type },
    el("div", { class: "who", text: extra === "sending" ? `${who} · sending…` : who }),
    el("div", { class: "text", text }),
  );
}

export function renderMessage(m, names, open, closed) {
  if (!m || typeof m !== "object") return [];
  const text = textOf(m.content);
  if (m.type === "human") return [bubble("human", text)];
  if (m.type === "ai") {
    const out = [];
    if (text.trim()) out.push(bubble("ai", text));
    for (const call of m.tool_calls || []) {
      out.push(
        el(
          "div",
          { class: "proposal", "data-testid": "proposed-call", "data-tool-call-id": call.id },
          el("span", { class: "proposal-label", text: "proposed tool call" }),
          el("code", { class: "proposal-call", title: JSON.stringify(call.args ?? {}, null, 2) },
            el("span", { class: "tool-name", text: call.name }),
            el("span", { class: "proposal-args", text: compactJSON(call.args, 160) }),
          ),
        ),
      );
    }
    return out;
  }
  if (m.type === "tool") {
    const artifact = m.artifact && typeof m.artifact === "object" ? m.artifact : {};
    const status = resultStatus(artifact.status || m.status || "success", artifact.payload);
    const name = m.name || names.get(m.tool_call_id) || "tool";
    const block = resultBlock(m.tool_call_id, name, status, text, open, closed, artifact.judged);
    return artifact.stored ? [block, wholeResultLink(m.tool_call_id, artifact.stored)] : [block];
  }
  if (text.trim()) {
    return [el("div", { class: "msg system", "data-type": m.type || "other" }, el("div", { class: "text", text }))];
  }
  return [];
}

// A result the model read cut (its beginning, with a note) is kept whole: the link
// fetches it with the reader's token (GET …/results/{call_id}) and saves it as a file.
function wholeResultLink(toolCallId, stored) {
  const chars = Number(stored.content_chars) || 0;
  const link = el("a", {
    href: "#",
    class: "whole-result small",
    "data-testid": "whole-result",
    text: `the whole result (${chars.toLocaleString("en")} characters)`,
  });
  link.addEventListener("click", async (event) => {
    event.preventDefault();
    try {
      const path = `${conversationPath(state.sid)}/results/${encodeURIComponent(toolCallId)}`;
      const res = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` }, cache: "no-store" });
      if (!res.ok) throw await errorOf(res);
      const url = URL.createObjectURL(await res.blob());
      el("a", { href: url, download: `${toolCallId}.txt` }).click();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      handleError(err);
    }
  });
  return el("p", { class: "muted small whole-result-line" }, link);
}

// A call answered with "respond" is recorded as rejected (the tool did not run), with
// the decision in its payload: it reads "responded", the person's answer below.
function resultStatus(status, payload) {
  return payload && typeof payload === "object" && payload.decision === "respond" ? "responded" : status;
}

export function resultBlock(toolCallId, name, status, text, open, closed, judged) {
  const bad = status !== "success" && status !== "responded";
  const short = text.length <= 600 && text.split("\n").length <= 12;
  const details = el("details", {
    class: `result${bad ? " error" : ""} status-${status}`,
    "data-testid": "tool-result",
    "data-tool-call-id": toolCallId || "",
    "data-status": status,
  });
  if ((short && !(closed && closed.has(toolCallId))) || (open && open.has(toolCallId))) {
    details.open = true;
  }
  const preview = text.replace(/\s+/g, " ").slice(0, 90);
  details.append(
    el(
      "summary",
      {},
      el("span", { class: "result-label", text: status === "success" ? "result" : `result · ${status}` }),
      el("span", { class: "tool-name", text: name }),
      el("span", { class: "result-preview", text: preview + (text.length > 90 ? "…" : "") }),
    ),
    ...(judged ? [el("p", { class: "small judged", "data-testid": "result-judged", text: judgedText(judged) })] : []),
    el("pre", { class: "result-body", text }),
  );
  return details;
}

export function liveResult(toolCallId, info) {
  const env = info.envelope || {};
  const text = typeof env.content === "string" ? env.content : compactJSON(env, 4000);
  const status = resultStatus(env.status || "success", env.payload);
  return resultBlock(toolCallId, info.name || "tool", status, text, undefined, undefined, env.judged);
}
