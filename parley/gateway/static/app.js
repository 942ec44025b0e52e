// Parley: the approval page. Plain JS in ES modules, no framework, no build step; this
// module wires the page and starts it.
//
// The modules form layers, each importing only from those below it (checked by
// tests/test_page_modules.py):
//   state.js, events.js      the shared state and constants; the event bus
//   dom.js                   building nodes, formatting, the error banner
//   api.js                   the gateway's REST API (a refused token: EVENTS.UNAUTHORIZED)
//   refresh.js               reading the snapshot and the list again (EVENTS.SNAPSHOT, ...)
//   transcript.js, list.js,  views that need no other view (inbox.js: calls waiting on
//   inbox.js, grants.js      the user across conversations, identical ones at once;
//                            grants.js: remembered decisions, Revoke, a card's remember)
//   approvals.js, stream.js  the approval cards; the live events
//   undo.js                  approved calls in their undo window (countdown, Undo)
//   conversation.js, auth.js opening, rendering and sending; signing in and out
//   app.js                   listens to the events and wires the page
// A module that must reach one above it announces an event instead of importing it.
//
// Untrusted text (messages, tool output, arguments, ids) only ever reaches the DOM
// through textContent / attribute setters, never innerHTML.

import { approveAll, fitAllArgs, tickExpiries } from "./approvals.js";
import { hashParams, loadMe, showTokenForm, signOut, takeTokenFromHash } from "./auth.js";
import { openConversation, renderChat, retryFrom, sendMessage } from "./conversation.js";
import { clearError, randomId } from "./dom.js";
import { EVENTS, on } from "./events.js";
import { loadInbox, renderInbox, toggleInbox } from "./inbox.js";
import { renderList } from "./list.js";
import { loadList } from "./refresh.js";
import { $, LIST_EVERY_MS, SESSION_RE, state, TOKEN_KEY } from "./state.js";
import { beginSignIn, finishSignIn, loadOidcConfig, storedOidcToken } from "./oidc.js";
import { keepTranscriptInView } from "./transcript.js";

// What the lower modules announce, and who answers.
function listen() {
  on(EVENTS.UNAUTHORIZED, (message) => signOut(`The gateway refused this token: ${message}`));
  on(EVENTS.SNAPSHOT, () => {
    renderChat();
    renderList(); // the open conversation's row says what its header says
    renderInbox(); // the open conversation's state says which of its calls still wait
  });
  on(EVENTS.CONVERSATIONS, () => {
    renderList();
    loadInbox(); // read with the list: what waits on the user changes with it
  });
  on(EVENTS.OPEN, openConversation);
  on(EVENTS.RETRY, retryFrom);
}

// The clocks on the page: each card's expiry, and the list's "N min ago".
function tickClocks() {
  tickExpiries();
  if (state.conversations.length) renderList();
  renderInbox();
}

function onHashChange() {
  if (takeTokenFromHash()) {
    if (!state.started) start();
    else loadMe();
  }
  const sid = hashParams().get("c");
  if (state.started && sid && sid !== state.sid) openConversation(sid);
}

function start() {
  state.started = true;
  $("token-view").hidden = true;
  $("app-view").hidden = false;
  loadMe();
  loadList();
  clearInterval(state.listTimer);
  state.listTimer = setInterval(() => {
    if (!document.hidden) loadList();
  }, LIST_EVERY_MS);
  const sid = hashParams().get("c");
  if (sid) openConversation(sid);
}

function wire() {
  $("error-dismiss").addEventListener("click", clearError);
  $("sign-out").addEventListener("click", () => signOut());
  $("oidc-sign-in").addEventListener("click", beginSignIn);
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    try {
      localStorage.setItem(TOKEN_KEY, token);
    } catch {
      /* ignore */
    }
    state.token = token;
    clearError();
    start();
  });
  $("new-id").value = randomId();
  $("new-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const sid = $("new-id").value.trim();
    const problem = $("new-error");
    if (!SESSION_RE.test(sid)) {
      problem.textContent = "Use 1-128 characters from A-Z a-z 0-9 . _ -";
      problem.hidden = false;
      return;
    }
    problem.hidden = true;
    openConversation(sid);
    $("new-id").value = randomId();
  });
  $("new-id").addEventListener("input", () => {
    $("new-error").hidden = true;
  });
  $("list-refresh").addEventListener("click", loadList);
  $("inbox-refresh").addEventListener("click", loadInbox);
  $("inbox-title").addEventListener("click", toggleInbox);
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    sendMessage();
  });
  $("message-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      sendMessage();
    }
  });
  keepTranscriptInView();
  $("approve-all").addEventListener("click", approveAll);
  window.addEventListener("hashchange", onHashChange);
  window.addEventListener("resize", fitAllArgs);
  setInterval(tickClocks, 30000);
}

async function boot() {
  listen();
  wire();
  await loadOidcConfig();
  try {
    await finishSignIn(); // back from the provider: its token is the bearer now
  } catch (err) {
    showTokenForm(err.message);
    return;
  }
  takeTokenFromHash();
  if (!state.token) state.token = storedOidcToken();
  if (!state.token) {
    try {
      state.token = localStorage.getItem(TOKEN_KEY);
    } catch {
      state.token = null;
    }
  }
  if (state.token) start();
  else showTokenForm();
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
else boot();
