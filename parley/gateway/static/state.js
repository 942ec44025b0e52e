// The page's state, shared by its views: one object, and the constants they use.

export const TOKEN_KEY = "parley.token";
export const SESSION_RE = /^[A-Za-z0-9._-]{1,128}$/;
export const LIST_EVERY_MS = 15000;
export const STREAM_404_RETRY_MS = 3000;
// While the first message of a new conversation is on its way, the conversation is about
// to exist: look again soon, so its reply streams from the start.
export const STREAM_404_SENDING_RETRY_MS = 100;
export const STREAM_MAX_BACKOFF_MS = 15000;

export const $ = (id) => document.getElementById(id);

export const state = {
  token: null,
  userId: null, // the signed-in user (GET /v1/me), once read
  started: false,
  sid: null, // the open conversation
  snapshot: null, // its latest snapshot (null: not created yet)
  snapshotSeq: 0, // guards against an older snapshot answer landing last
  conversations: [],
  cards: new Map(), // tool_call_id -> card element
  busy: false, // a send or a decision request is in flight
  running: false, // between RUN_STARTED and RUN_FINISHED / RUN_ERROR
  runStarts: 0, // RUN_STARTED events seen (see loadSnapshot)
  workingLabel: "working…",
  live: new Map(), // messageId -> streamed assistant text not yet in the snapshot
  liveResults: new Map(), // toolCallId -> {name, envelope} not yet in the snapshot
  liveNames: new Map(), // toolCallId -> tool name (from TOOL_CALL_START)
  endedRefreshFor: null, // the conversation re-read once because the list says it ended
  pendingText: null, // the message being sent, shown until the snapshot has it
  stream: { gen: 0, controller: null, wake: null, lastId: null },
  refreshTimer: null,
  listTimer: null,
};

// A closed conversation has nothing to decide, whatever its last state said.
export const isEnded = (snap) => Boolean(snap && snap.status === "ended");
export const currentPending = () =>
  isEnded(state.snapshot) ? [] : (state.snapshot && state.snapshot.pending) || [];
