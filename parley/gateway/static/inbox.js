// The inbox in the sidebar: every call waiting on the signed-in user, across
// conversations (GET /v1/inbox: no worker needed), the oldest first, each with its
// conversation, age and expiry. Identical calls (the same tool and canonical arguments,
// `args_hash`) are grouped, and a group of several has "Approve all N identical"
// (POST /v1/inbox/decide): each call is decided in its own conversation, and the page
// says which were not. A click on a call opens its conversation (EVENTS.OPEN).

import { api, handleError } from "./api.js";
import { compactJSON, el, expiryText, relativeTime, showError } from "./dom.js";
import { emit, EVENTS } from "./events.js";
import { scheduleRefresh } from "./refresh.js";
import { $, state } from "./state.js";

const ARGS_CHARS = 80;

let inbox = null; // the latest GET /v1/inbox answer
let deciding = false; // a batch decision is in flight: its answer comes first
const answered = new Set(); // calls a batch here decided, until the inbox stops listing them

export async function loadInbox() {
  if (!state.token || deciding) return;
  try {
    inbox = await api("GET", "/v1/inbox");
  } catch (err) {
    handleError(err);
    return;
  }
  const listed = new Set((inbox.calls || []).map((i) => keyOf(i.session_id, i.call.tool_call_id)));
  for (const key of answered) if (!listed.has(key)) answered.delete(key);
  renderInbox();
}

// On a phone with a conversation open, the inbox is its title (the count) until opened
// (inbox.css): the conversation keeps the screen.
export function toggleInbox() {
  const open = !$("inbox").classList.contains("open");
  $("inbox").classList.toggle("open", open);
  $("inbox-title").setAttribute("aria-expanded", String(open));
}

// Calls in groups of identical ones, each group where its oldest call is.
function groupsOf(calls) {
  const groups = new Map();
  for (const item of calls) {
    const hash = item.call.args_hash;
    const key = hash ? `${item.call.name}\u0000${hash}` : `one\u0000${item.session_id}\u0000${item.call.tool_call_id}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(item);
  }
  return [...groups.values()];
}

// Whether a listed call still waits, as far as the page knows better than the inbox's
// read (visibility lags a decision by a moment): the open conversation's snapshot (its
// state, read after the inbox maybe) and the calls a batch here answered.
function stillWaiting(item) {
  if (answered.has(keyOf(item.session_id, item.call.tool_call_id))) return false;
  const snap = state.snapshot;
  if (item.session_id !== state.sid || !snap || !Array.isArray(snap.pending)) return true;
  return snap.pending.some((c) => c.tool_call_id === item.call.tool_call_id);
}

function keyOf(sessionId, callId) {
  return `${sessionId}\u0000${callId}`;
}

export function renderInbox() {
  const calls = ((inbox && inbox.calls) || []).filter(stillWaiting);
  const unread = (inbox && inbox.unread) || [];
  $("inbox").hidden = !calls.length && !unread.length;
  $("inbox-title").textContent = `Waiting on you (${calls.length})`;
  const rows = groupsOf(calls).map(groupNode);
  for (const u of unread) {
    rows.push(
      el(
        "li",
        { class: "inbox-unread", "data-testid": "inbox-unread", "data-session-id": u.session_id },
        el("span", { class: "conv-id", text: u.session_id }),
        el("span", { class: "conv-meta", text: `${(u.pending_tools || []).join(", ")} wait: ${u.reason}` }),
      ),
    );
  }
  $("inbox-calls").replaceChildren(...rows);
}

function groupNode(items) {
  const first = items[0].call;
  const approvable = items.filter((i) => i.awaiting && i.awaiting.may_approve);
  const head = el(
    "div",
    { class: "inbox-group-head" },
    el("span", { class: "inbox-tool", text: first.name }),
    el("code", { class: "inbox-args", text: compactJSON(first.args, ARGS_CHARS) }),
  );
  if (items.length > 1 && approvable.length > 1) {
    const button = el("button", {
      type: "button",
      class: "approve inbox-approve",
      "data-testid": "inbox-approve-group",
      text: `Approve all ${approvable.length} identical`,
    });
    button.addEventListener("click", () => approveGroup(approvable[0], approvable.length, button));
    head.append(button);
  }
  return el(
    "li",
    { class: "inbox-group", "data-testid": "inbox-group", "data-tool": first.name },
    head,
    el("ul", { class: "inbox-group-calls" }, ...items.map(callNode)),
  );
}

function callNode(item) {
  const c = item.call;
  const meta = [`asked ${relativeTime(item.waiting_since)}`];
  if (item.rule) meta.push(`rule ${item.rule}`);
  if (item.owner && item.owner !== state.userId) meta.push(`by ${item.owner}`);
  if (item.awaiting && !item.awaiting.may_approve && item.awaiting.text) meta.push(item.awaiting.text);
  const button = el(
    "button",
    {
      type: "button",
      class: "conv inbox-call" + (item.session_id === state.sid ? " active" : ""),
      "data-testid": "inbox-call",
      "data-session-id": item.session_id,
      "data-tool-call-id": c.tool_call_id,
    },
    el("span", { class: "conv-id", text: `${item.session_id} · ${c.tool_call_id}` }),
    el("span", { class: "expiry", "data-expires-at": c.expires_at || "", text: expiryText(c.expires_at) }),
    el("span", { class: "conv-meta", text: meta.join(" · ") }),
  );
  button.addEventListener("click", () => emit(EVENTS.OPEN, item.session_id));
  return el("li", {}, button);
}

async function approveGroup(item, count, button) {
  deciding = true;
  button.disabled = true;
  button.textContent = `Approving ${count}…`;
  try {
    const batch = await api("POST", "/v1/inbox/decide", {
      session_id: item.session_id,
      tool_call_id: item.call.tool_call_id,
      action: "approve",
    });
    for (const a of batch.applied || []) {
      if (a.outcome === "decided") for (const id of a.tool_call_ids || []) answered.add(keyOf(a.session_id, id));
    }
    const missed = (batch.applied || []).filter((a) => a.outcome !== "decided");
    if (missed.length) {
      showError(missed.map((a) => `${a.session_id}: ${a.detail}`).join("; "));
    }
  } catch (err) {
    handleError(err);
  } finally {
    deciding = false;
    scheduleRefresh(0); // the list, the open conversation and (through the list) the inbox
  }
}
