// Opening a conversation (its snapshot, its event stream) and sending a message.

import { api, ApiError, conversationPath, handleError } from "./api.js";
import { setBusy } from "./approvals.js";
import { clearError, el, showError } from "./dom.js";
import { loadList, renderList } from "./list.js";
import { $, SESSION_RE, state } from "./state.js";
import { kickStream, startStream, stopStream } from "./stream.js";
import { countHumans, renderChat, renderTranscript, setStatus } from "./transcript.js";

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
  state.choices.clear();
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

export async function loadSnapshot() {
  const sid = state.sid;
  if (!sid) return null;
  const seq = ++state.snapshotSeq;
  const runStartsBefore = state.runStarts;
  let snap = null;
  try {
    snap = await api("GET", conversationPath(sid));
  } catch (err) {
    if (seq !== state.snapshotSeq || sid !== state.sid) return null;
    if (err instanceof ApiError && err.status === 404) {
      snap = null; // not created yet: an empty chat
    } else {
      handleError(err);
      if (!state.snapshot) renderChat();
      return state.snapshot;
    }
  }
  if (seq !== state.snapshotSeq || sid !== state.sid) return snap;
  state.snapshot = snap;
  // The snapshot was asked for after the last RUN_STARTED we saw: it knows better.
  if (snap && snap.status !== "running" && runStartsBefore === state.runStarts) {
    state.running = false;
  }
  if (!state.running) {
    // Whatever the stream showed is in this snapshot now.
    state.live.clear();
    state.liveResults.clear();
  }
  renderChat();
  return snap;
}

export function scheduleRefresh(delay = 200) {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => {
    loadSnapshot();
    loadList();
  }, delay);
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
  renderTranscript();
  // The same text sent again after a failure keeps its id: the gateway applies a
  // message id once, so a resend after a lost answer never duplicates it.
  const retry = state.unsent && state.unsent.text === text ? state.unsent : null;
  const messageId = retry ? retry.id : `web-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  state.unsent = { text, id: messageId };
  try {
    const turn = await api("POST", `${conversationPath(sid)}/messages`, { text, message_id: messageId });
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
