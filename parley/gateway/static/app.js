// Parley: the approval page. Plain JS in ES modules (one per view), no framework, no
// build step; this module wires the page and starts it.
//
// Untrusted text (messages, tool output, arguments, ids) only ever reaches the DOM
// through textContent / attribute setters, never innerHTML.

import { approveAll, sendChoices, tickExpiries } from "./approvals.js";
import { hashParams, loadMe, showTokenForm, signOut, takeTokenFromHash } from "./auth.js";
import { openConversation, sendMessage } from "./conversation.js";
import { clearError, randomId } from "./dom.js";
import { loadList } from "./list.js";
import { $, LIST_EVERY_MS, SESSION_RE, state, TOKEN_KEY } from "./state.js";
import { keepTranscriptInView } from "./transcript.js";

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
  $("send-decisions").addEventListener("click", sendChoices);
  window.addEventListener("hashchange", onHashChange);
  setInterval(tickExpiries, 30000);
}

function boot() {
  wire();
  takeTokenFromHash();
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
