// The conversation view: opening a conversation (its snapshot, its event stream),
// rendering it whole (transcript, cards, composer) and sending a message.

import { api, conversationPath, handleError } from "./api.js";
import { renderCards, setBusy } from "./approvals.js";
import { clearError, el, showError } from "./dom.js";
import { renderGrants } from "./grants.js";
import { renderList } from "./list.js";
import { loadList, loadSnapshot, scheduleRefresh } from "./refresh.js";
import { $, isEnded, SESSION_RE, state } from "./state.js";
import { kickStream, startStream, stopStream } from "./stream.js";
import { countHumans, renderTranscript, setStatus, updateWorking } from "./transcript.js";
import { renderScheduled } from "./undo.js";

export function openConversation(sid) {
  if (!SESSION_RE.test(sid)) {
    showError(`"${sid}" is not a valid session id: use 1-128 characters from A-Z a-z 0-9 . _ -`);
    return;
  }
  if (location.hash !== `#c=${sid}`) location.hash = `c=${sid}`; // hashchange: no-op below
  if (sid === state.sid) {
    scheduleRefresh(0);
    return;
  }
  stopStream();
  state.sid = sid;
  state.snapshot = null;
  state.cards.clear();
  $("cards").replaceChildren();
  state.live.clear();
  state.liveResults.clear();
  state.liveNames.clear();
  state.pendingText = null;
  state.running = false;
  state.workingLabel = "working…";
  $("chat-empty").hidden = true;
  $("chat-view").hidden = false;
  $("chat-title").textContent = sid;
  $("transcript").replaceChildren(el("p", { class: "muted center", text: "Loading…" }));
  setStatus(null);
  $("temporal-link").hidden = true;
  renderList();
  loadSnapshot().then((snap) => {
    if (state.sid !== sid) return;
    const count = snap && Number.isInteger(snap.event_count) ? snap.event_count : 0;
    startStream(sid, count > 0 ? String(count - 1) : null);
  });
  $("message-input").focus();
}

export function renderChat() {
  const snap = state.snapshot;
  setStatus(snap ? snap.status : null);
  const link = $("temporal-link");
  const url = snap && snap.temporal_ui_url;
  if (url && /^https?:\/\//i.test(url)) {
    link.href = url;
    link.hidden = false;
  } else {
    link.hidden = true;
  }
  renderTranscript();
  // A closed conversation offers no decision, and takes no message.
  const ended = isEnded(snap);
  renderCards(snap && !ended ? snap.pending || [] : []);
  renderScheduled(snap); // approved calls in their undo window, then what became of them
  renderGrants(snap); // the remembered decisions in force, each with Revoke
  const input = $("message-input");
  input.disabled = ended;
  if (ended) input.placeholder = "This conversation has ended: open a new one to go on.";
  else if (snap && snap.pending && snap.pending.length) {
    input.placeholder = "Decide the pending tool calls above before sending another message.";
  } else input.placeholder = "Message the agent… (Enter to send, Shift+Enter for a new line)";
  updateWorking();
}

export async function sendMessage() {
  const sid = state.sid;
  const input = $("message-input");
  const text = input.value;
  if (!sid || state.busy || !text.trim()) return;
  clearError();
  const before = (state.snapshot && state.snapshot.transcript) || [];
  state.pendingText = { text, humans: countHumans(before) };
  input.value = "";
  setBusy(true);
  renderTranscript({ toBottom: true });
  // The same text sent again after a failure keeps its id: the gateway applies a
  // message id once, so a resend after a lost answer never duplicates it.
  const retry = state.unsent && state.unsent.text === text ? state.unsent : null;
  const messageId = retry ? retry.id : `web-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  state.unsent = { text, id: messageId };
  try {
    const posted = api("POST", `${conversationPath(sid)}/messages`, { text, message_id: messageId });
    kickStream(); // a stream waiting for a new conversation looks again, soon, while it starts
    const turn = await posted;
    state.unsent = null;
    if (state.sid === sid && turn && turn.status === "failed") {
      showError(`The turn failed: ${turn.error || "no detail"}`);
    }
  } catch (err) {
    if (state.sid === sid && !input.value) input.value = text; // nothing was lost
    handleError(err);
  } finally {
    state.pendingText = null;
    setBusy(false);
    if (state.sid === sid) {
      await loadSnapshot();
      loadList();
      kickStream(); // a new conversation exists now: no need to wait for the retry
    }
  }
}

// "Try again from here": the conversation goes back to just before message ``index``
// (a rewind: a new run of the same conversation; the turns cut away stay readable in
// the run before, in Temporal), and the message's text is back in the box to edit.
export async function retryFrom(index, text) {
  const sid = state.sid;
  if (!sid || state.busy) return;
  clearError();
  setBusy(true);
  try {
    await api("POST", `${conversationPath(sid)}/rewind`, { to: index });
    state.live.clear();
    state.liveResults.clear();
    const input = $("message-input");
    input.value = text;
    input.focus();
  } catch (err) {
    handleError(err);
  } finally {
    setBusy(false);
    if (state.sid === sid) {
      await loadSnapshot();
      kickStream();
    }
  }
}
