// Reading what the gateway knows again: the open conversation's snapshot and the
// conversation list. Each read lands in `state` and is announced (EVENTS.SNAPSHOT,
// EVENTS.CONVERSATIONS) for the views to render; no view is imported here.

import { api, ApiError, conversationPath, handleError } from "./api.js";
import { emit, EVENTS } from "./events.js";
import { state } from "./state.js";

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
      if (!state.snapshot) emit(EVENTS.SNAPSHOT);
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
  emit(EVENTS.SNAPSHOT);
  return snap;
}

export async function loadList() {
  if (!state.token) return;
  try {
    const data = await api("GET", "/v1/conversations");
    state.conversations = (data && data.conversations) || [];
    emit(EVENTS.CONVERSATIONS);
  } catch (err) {
    handleError(err);
  }
}

export function scheduleRefresh(delay = 200) {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => {
    loadSnapshot();
    loadList();
  }, delay);
}
