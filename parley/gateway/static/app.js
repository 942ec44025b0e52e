// Parley: the approval page. Plain JS, no framework, no build step.
//
// Untrusted text (messages, tool output, arguments, ids) only ever reaches the DOM
// through textContent / attribute setters, never innerHTML.
"use strict";

(() => {
  const TOKEN_KEY = "parley.token";
  const SESSION_RE = /^[A-Za-z0-9._-]{1,128}$/;
  const LIST_EVERY_MS = 15000;
  const STREAM_404_RETRY_MS = 3000;
  const STREAM_MAX_BACKOFF_MS = 15000;

  const $ = (id) => document.getElementById(id);

  const state = {
    token: null,
    started: false,
    sid: null, // the open conversation
    snapshot: null, // its latest snapshot (null: not created yet)
    snapshotSeq: 0, // guards against an older snapshot answer landing last
    conversations: [],
    choices: new Map(), // tool_call_id -> decision recorded on its card
    cards: new Map(), // tool_call_id -> card element
    busy: false, // a send or a decision request is in flight
    running: false, // between RUN_STARTED and RUN_FINISHED / RUN_ERROR
    runStarts: 0, // RUN_STARTED events seen (see loadSnapshot)
    workingLabel: "working…",
    live: new Map(), // messageId -> streamed assistant text not yet in the snapshot
    liveResults: new Map(), // toolCallId -> {name, envelope} not yet in the snapshot
    liveNames: new Map(), // toolCallId -> tool name (from TOOL_CALL_START)
    pendingText: null, // the message being sent, shown until the snapshot has it
    stream: { gen: 0, controller: null, wake: null, lastId: null },
    refreshTimer: null,
    listTimer: null,
  };

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, type, message) {
      super(message);
      this.status = status;
      this.type = type;
    }
  }

  const UNREACHABLE =
    "The gateway is unreachable. Check that it is running and your connection, then try again.";

  async function errorOf(res) {
    let body = null;
    try {
      body = JSON.parse(await res.text());
    } catch {
      body = null;
    }
    const err = body && typeof body === "object" ? body.error : null;
    const message =
      err && typeof err.message === "string" && err.message
        ? err.message
        : `The gateway answered ${res.status} ${res.statusText || ""}`.trim();
    return new ApiError(res.status, (err && err.type) || `http_${res.status}`, message);
  }

  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${state.token}`, Accept: "application/json" };
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch {
      throw new ApiError(0, "unreachable", UNREACHABLE);
    }
    if (!res.ok) throw await errorOf(res);
    try {
      const text = await res.text();
      return text ? JSON.parse(text) : null;
    } catch {
      throw new ApiError(0, "unreachable", UNREACHABLE);
    }
  }

  const conversationPath = (sid) => `/v1/conversations/${encodeURIComponent(sid)}`;

  function handleError(err) {
    if (err instanceof ApiError && err.status === 401) {
      signOut(`The gateway refused this token: ${err.message}`);
      return;
    }
    showError(err && err.message ? err.message : String(err));
  }

  // ---------------------------------------------------------------- small helpers

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function randomId() {
    const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    const bytes = new Uint8Array(8);
    crypto.getRandomValues(bytes);
    return "web-" + Array.from(bytes, (b) => alphabet[b % alphabet.length]).join("");
  }

  function textOf(content) {
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content
        .map((part) => {
          if (typeof part === "string") return part;
          if (part && typeof part === "object" && typeof part.text === "string") return part.text;
          return "";
        })
        .join("");
    }
    if (content === null || content === undefined) return "";
    return JSON.stringify(content);
  }

  function compactJSON(value, limit) {
    let text;
    try {
      text = JSON.stringify(value ?? {});
    } catch {
      text = String(value);
    }
    return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
  }

  const statusText = (status) => String(status || "").replace(/_/g, " ");

  function relativeTime(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return "";
    const s = Math.round((Date.now() - t) / 1000);
    if (s < 45) return "just now";
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return new Date(t).toLocaleDateString();
  }

  function expiryText(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return "";
    const at = new Date(t);
    const sameDay = at.toDateString() === new Date().toDateString();
    const clock = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    const when = sameDay ? clock : `${at.toLocaleDateString()} ${clock}`;
    const minutes = Math.ceil((t - Date.now()) / 60000);
    if (minutes <= 0) return `expired at ${when}`;
    if (minutes < 60) return `expires ${when} (in ${minutes} min)`;
    const h = Math.floor(minutes / 60);
    const m = minutes % 60;
    return `expires ${when} (in ${h} h${m ? ` ${m} min` : ""})`;
  }

  // ---------------------------------------------------------------- error banner

  function showError(message) {
    $("error-text").textContent = message;
    $("error").hidden = false;
  }

  function clearError() {
    $("error").hidden = true;
    $("error-text").textContent = "";
  }

  // ---------------------------------------------------------------- auth

  function hashParams() {
    return new URLSearchParams(location.hash.replace(/^#/, ""));
  }

  // Takes a token from `#token=...` (and removes it from the address bar).
  function takeTokenFromHash() {
    const params = hashParams();
    const token = params.get("token");
    if (!token) return false;
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
    try {
      localStorage.setItem(TOKEN_KEY, token);
    } catch {
      /* private mode: keep it in memory only */
    }
    state.token = token;
    return true;
  }

  function showTokenForm(hint) {
    $("app-view").hidden = true;
    $("token-view").hidden = false;
    $("sign-out").hidden = true;
    $("me").textContent = "";
    $("token-hint").hidden = !hint;
    $("token-hint").textContent = hint || "";
    $("token-input").value = "";
    $("token-input").focus();
  }

  function signOut(hint) {
    try {
      localStorage.removeItem(TOKEN_KEY);
    } catch {
      /* ignore */
    }
    state.token = null;
    state.started = false;
    stopStream();
    clearInterval(state.listTimer);
    state.sid = null;
    state.snapshot = null;
    showTokenForm(hint);
  }

  async function loadMe() {
    try {
      const me = await api("GET", "/v1/me");
      $("me").textContent = me && me.user_id ? `signed in as ${me.user_id}` : "";
      $("sign-out").hidden = false;
    } catch (err) {
      handleError(err);
    }
  }

  // ---------------------------------------------------------------- conversation list

  async function loadList() {
    if (!state.token) return;
    try {
      const data = await api("GET", "/v1/conversations");
      state.conversations = (data && data.conversations) || [];
      renderList();
    } catch (err) {
      handleError(err);
    }
  }

  function renderList() {
    const list = $("conversations");
    const items = state.conversations.slice();
    if (state.sid && !items.some((c) => c.session_id === state.sid)) {
      items.unshift({ session_id: state.sid, status: "new", pending_tools: [] });
    }
    list.replaceChildren(
      ...items.map((c) => {
        const status = c.status || "unknown";
        const meta = [];
        if (c.pending_tools && c.pending_tools.length) {
          meta.push(`waiting: ${c.pending_tools.join(", ")}`);
        }
        const when = c.last_activity_at || c.started_at;
        if (when) meta.push(relativeTime(when));
        const button = el(
          "button",
          {
            type: "button",
            class:
              "conv" +
              (c.session_id === state.sid ? " active" : "") +
              (status === "awaiting_approval" ? " awaiting" : ""),
            "data-testid": "conversation",
            "data-session-id": c.session_id,
            "aria-current": c.session_id === state.sid ? "true" : null,
          },
          el(
            "span",
            { class: "conv-top" },
            el("span", { class: "conv-id", text: c.session_id }),
            el("span", { class: `badge status-${status}`, text: statusText(status) }),
          ),
          meta.length ? el("span", { class: "conv-meta", text: meta.join(" · ") }) : null,
        );
        button.addEventListener("click", () => openConversation(c.session_id));
        return el("li", {}, button);
      }),
    );
    $("list-empty").hidden = items.length > 0;
  }

  // ---------------------------------------------------------------- opening a conversation

  function openConversation(sid) {
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

  async function loadSnapshot() {
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

  function scheduleRefresh(delay = 200) {
    clearTimeout(state.refreshTimer);
    state.refreshTimer = setTimeout(() => {
      loadSnapshot();
      loadList();
    }, delay);
  }

  // ---------------------------------------------------------------- chat rendering

  function setStatus(status) {
    const badge = $("status");
    const shown = status || "new";
    badge.textContent = statusText(shown);
    badge.dataset.status = shown;
    badge.className = `badge status-${shown}`;
  }

  function updateWorking() {
    const snapRunning = state.snapshot && state.snapshot.status === "running";
    const on = state.running || state.busy || Boolean(snapRunning);
    $("working").hidden = !on;
    $("working-text").textContent = state.running ? state.workingLabel : "working…";
    $("send").disabled = state.busy;
  }

  function renderChat() {
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
    renderCards(snap ? snap.pending || [] : []);
    const input = $("message-input");
    input.placeholder =
      snap && snap.pending && snap.pending.length
        ? "Decide the pending tool calls above before sending another message."
        : "Message the agent… (Enter to send, Shift+Enter for a new line)";
    updateWorking();
  }

  function renderTranscript() {
    const box = $("transcript");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 60;
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
    for (const m of messages) nodes.push(...renderMessage(m, names, open, closed));

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
    if (!nodes.length) {
      nodes.push(
        el("p", {
          class: "muted center",
          text: snap ? "No messages yet." : "A new conversation: send a message to start it.",
        }),
      );
    }
    box.replaceChildren(...nodes);
    if (atBottom || state.busy) box.scrollTop = box.scrollHeight;
  }

  const countHumans = (messages) => messages.filter((m) => m && m.type === "human").length;

  function bubble(type, text, extra) {
    const who = type === "human" ? "You" : "Agent";
    return el(
      "div",
      { class: `msg ${type}${extra ? " " + extra : ""}`, "data-type": type },
      el("div", { class: "who", text: extra === "sending" ? `${who} · sending…` : who }),
      el("div", { class: "text", text }),
    );
  }

  function renderMessage(m, names, open, closed) {
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
      const artifactStatus = m.artifact && typeof m.artifact === "object" ? m.artifact.status : null;
      const status = artifactStatus || m.status || "success";
      const name = m.name || names.get(m.tool_call_id) || "tool";
      return [resultBlock(m.tool_call_id, name, status, text, open, closed)];
    }
    if (text.trim()) {
      return [el("div", { class: "msg system", "data-type": m.type || "other" }, el("div", { class: "text", text }))];
    }
    return [];
  }

  function resultBlock(toolCallId, name, status, text, open, closed) {
    const bad = status !== "success";
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
        el("span", { class: "result-label", text: bad ? `result · ${status}` : "result" }),
        el("span", { class: "tool-name", text: name }),
        el("span", { class: "result-preview", text: preview + (text.length > 90 ? "…" : "") }),
      ),
      el("pre", { class: "result-body", text }),
    );
    return details;
  }

  function liveResult(toolCallId, info) {
    const env = info.envelope || {};
    const text = typeof env.content === "string" ? env.content : compactJSON(env, 4000);
    return resultBlock(toolCallId, info.name || "tool", env.status || "success", text);
  }

  // ---------------------------------------------------------------- approval cards

  function renderCards(pending) {
    const box = $("approvals");
    const cards = $("cards");
    const ids = new Set(pending.map((p) => p.tool_call_id));
    for (const [id, card] of state.cards) {
      if (!ids.has(id)) {
        card.remove();
        state.cards.delete(id);
        state.choices.delete(id);
      }
    }
    for (const p of pending) {
      let card = state.cards.get(p.tool_call_id);
      if (!card) {
        card = buildCard(p);
        state.cards.set(p.tool_call_id, card);
      }
      cards.append(card); // keeps the order of `pending`
    }
    box.hidden = pending.length === 0;
    $("approvals-title").textContent =
      pending.length === 1
        ? "1 tool call needs your decision"
        : `${pending.length} tool calls need your decision — decide each, they are sent together`;
    refreshCards();
  }

  function buildCard(p) {
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
    const choice = el("span", { class: "choice-text", "data-testid": "choice" });
    const change = el("button", { type: "button", class: "link-button", text: "change" });
    const choiceRow = el("div", { class: "choice", hidden: true }, choice, change);
    const expiry = el("span", { class: "expiry", "data-expires-at": p.expires_at || "" });
    expiry.textContent = p.expires_at ? expiryText(p.expires_at) : "";

    const card = el(
      "div",
      { class: "card", "data-testid": "approval-card", "data-tool-call-id": p.tool_call_id },
      el(
        "div",
        { class: "card-head" },
        el("span", { class: "card-kicker", text: "Approve tool call?" }),
        el("span", { class: "tool-name big", text: p.name }),
        el("span", { class: "spacer" }),
        expiry,
      ),
      p.description ? el("p", { class: "desc", text: p.description }) : null,
      p.reason ? el("p", { class: "small muted reason", text: "Needs approval: " + p.reason }) : null,
      el("label", { class: "small muted", text: "Arguments (JSON, editable)" }),
      textarea,
      argsError,
      editedNote,
      el(
        "div",
        { class: "card-actions" },
        approve,
        edit,
        el("span", { class: "spacer" }),
        reason,
        reject,
      ),
      choiceRow,
    );
    card._parley = { p, args, textarea, argsError, editedNote, reason, approve, edit, reject, choice, choiceRow };

    textarea.addEventListener("input", () => {
      argsError.hidden = true;
      const edited = textarea.value.trim() !== args.trim();
      editedNote.hidden = !edited;
      card.classList.toggle("edited", edited);
    });
    // The card a button sits on decides, whatever the card map holds meanwhile.
    approve.addEventListener("click", () => choose(p.tool_call_id, "approve", card));
    edit.addEventListener("click", () => choose(p.tool_call_id, "edit", card));
    reject.addEventListener("click", () => choose(p.tool_call_id, "reject", card));
    reason.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        choose(p.tool_call_id, "reject", card);
      }
    });
    change.addEventListener("click", () => {
      state.choices.delete(p.tool_call_id);
      refreshCards();
    });
    return card;
  }

  function decisionFor(card, action) {
    const ui = card._parley;
    const id = ui.p.tool_call_id;
    if (action === "approve") return { tool_call_id: id, action: "approve" };
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
    const decision = { tool_call_id: id, action: "reject" };
    const reason = ui.reason.value.trim();
    if (reason) decision.message = reason;
    return decision;
  }

  function choose(toolCallId, action, card) {
    if (!card) return;
    // Check the arguments first: a mistake is shown even if a request is in flight.
    const decision = decisionFor(card, action);
    if (!decision || state.busy) return;
    const pending = currentPending();
    if (pending.length <= 1) {
      submitDecisions([decision]);
      return;
    }
    state.choices.set(toolCallId, decision);
    refreshCards();
    if (pending.every((p) => state.choices.has(p.tool_call_id))) sendChoices();
  }

  function approveAll() {
    if (state.busy) return;
    for (const p of currentPending()) {
      if (!state.choices.has(p.tool_call_id)) {
        state.choices.set(p.tool_call_id, { tool_call_id: p.tool_call_id, action: "approve" });
      }
    }
    refreshCards();
    sendChoices();
  }

  function sendChoices() {
    const decisions = currentPending().map((p) => state.choices.get(p.tool_call_id));
    if (decisions.some((d) => !d)) return;
    submitDecisions(decisions);
  }

  const currentPending = () => (state.snapshot && state.snapshot.pending) || [];

  function choiceText(d) {
    if (d.action === "approve") return "✓ will approve";
    if (d.action === "edit") return "✎ will approve with edited arguments";
    return d.message ? `✕ will reject: “${d.message}”` : "✕ will reject";
  }

  function refreshCards() {
    const pending = currentPending();
    const several = pending.length > 1;
    const chosen = pending.filter((p) => state.choices.has(p.tool_call_id)).length;
    for (const card of state.cards.values()) {
      const ui = card._parley;
      const d = state.choices.get(ui.p.tool_call_id);
      card.classList.toggle("chosen", Boolean(d));
      card.dataset.choice = d ? d.action : "";
      ui.choiceRow.hidden = !d;
      ui.choice.textContent = d ? choiceText(d) : "";
      for (const b of [ui.approve, ui.edit, ui.reject]) b.disabled = state.busy || Boolean(d);
      ui.textarea.readOnly = state.busy || Boolean(d);
      ui.reason.disabled = state.busy || Boolean(d);
      ui.choiceRow.querySelector("button").disabled = state.busy;
    }
    const approveAllButton = $("approve-all");
    approveAllButton.hidden = !several;
    approveAllButton.textContent = chosen ? "Approve the rest" : "Approve all";
    approveAllButton.disabled = state.busy || chosen === pending.length;
    const sendButton = $("send-decisions");
    sendButton.hidden = !(several && chosen === pending.length && !state.busy);
    $("approvals").classList.toggle("busy", state.busy);
  }

  async function submitDecisions(decisions) {
    const sid = state.sid;
    if (!sid || state.busy) return;
    setBusy(true);
    try {
      const turn = await api("POST", `${conversationPath(sid)}/decisions`, { decisions });
      if (state.sid === sid) {
        for (const d of decisions) state.choices.delete(d.tool_call_id);
        if (turn && turn.status === "failed") showError(`The turn failed: ${turn.error || "no detail"}`);
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

  function setBusy(busy) {
    state.busy = busy;
    refreshCards();
    updateWorking();
  }

  function tickExpiries() {
    for (const node of document.querySelectorAll(".expiry[data-expires-at]")) {
      if (node.dataset.expiresAt) node.textContent = expiryText(node.dataset.expiresAt);
    }
    if (state.conversations.length) renderList(); // "N min ago"
  }

  // ---------------------------------------------------------------- sending a message

  async function sendMessage() {
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

  // ---------------------------------------------------------------- live events (SSE over fetch)

  function stopStream() {
    const s = state.stream;
    s.gen += 1;
    if (s.controller) s.controller.abort();
    s.controller = null;
    if (s.wake) s.wake();
    s.wake = null;
    setLive(false);
  }

  function kickStream() {
    if (state.stream.wake) state.stream.wake();
  }

  function setLive(on) {
    const dot = $("live");
    if (!dot) return;
    dot.classList.toggle("on", on);
    dot.title = on ? "Live updates connected" : "Live updates reconnecting…";
  }

  function startStream(sid, lastId) {
    stopStream();
    const s = state.stream;
    const gen = s.gen;
    s.lastId = lastId;
    runStream(sid, gen);
  }

  async function runStream(sid, gen) {
    const s = state.stream;
    let backoff = 1000;
    while (gen === s.gen && state.token) {
      const controller = new AbortController();
      s.controller = controller;
      const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
      if (s.lastId !== null && s.lastId !== undefined) headers["Last-Event-ID"] = s.lastId;
      let wait = backoff;
      try {
        const res = await fetch(`${conversationPath(sid)}/events`, {
          headers,
          signal: controller.signal,
          cache: "no-store",
        });
        if (res.status === 404) {
          wait = STREAM_404_RETRY_MS; // not created yet: try again quietly
        } else if (res.status === 401) {
          if (gen === s.gen) handleError(await errorOf(res));
          return;
        } else if (!res.ok || !res.body) {
          if (res.status === 403) {
            if (gen === s.gen) handleError(await errorOf(res));
            return;
          }
          backoff = Math.min(backoff * 2, STREAM_MAX_BACKOFF_MS);
        } else {
          setLive(true);
          backoff = 1000;
          await readEvents(res.body, gen);
          wait = 500; // the server closed a healthy stream: reconnect soon
        }
      } catch {
        if (gen !== s.gen) return;
        backoff = Math.min(backoff * 2, STREAM_MAX_BACKOFF_MS);
      }
      if (gen !== s.gen) return;
      setLive(false);
      if (state.running) {
        // We may have missed the end of a run while disconnected.
        scheduleRefresh(0);
      }
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, wait);
        s.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      s.wake = null;
    }
  }

  async function readEvents(body, gen) {
    const s = state.stream;
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let data = [];
    let id = null;
    const dispatch = () => {
      if (id !== null) s.lastId = id;
      if (!data.length) return;
      const payload = data.join("\n");
      data = [];
      let event;
      try {
        event = JSON.parse(payload);
      } catch {
        return;
      }
      try {
        handleEvent(event);
      } catch (err) {
        console.error("parley: event", err);
      }
    };
    const line = (text) => {
      if (text === "") {
        dispatch();
        id = null;
        return;
      }
      if (text.startsWith(":")) return; // keepalive comment
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") data.push(value);
      else if (field === "id" && !value.includes("\0")) id = value;
    };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (gen !== s.gen) break;
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        for (;;) {
          const match = /\r\n|\r|\n/.exec(buffer);
          if (!match) break;
          // A lone "\r" at the end may be the first half of "\r\n": wait for more.
          if (match[0] === "\r" && match.index === buffer.length - 1) break;
          line(buffer.slice(0, match.index));
          buffer = buffer.slice(match.index + match[0].length);
          if (gen !== s.gen) break;
        }
      }
    } finally {
      try {
        reader.cancel();
      } catch {
        /* ignore */
      }
    }
  }

  function handleEvent(ev) {
    if (!ev || typeof ev !== "object") return;
    switch (ev.type) {
      case "RUN_STARTED":
        state.running = true;
        state.runStarts += 1;
        state.workingLabel = "working…";
        updateWorking();
        scheduleRefresh(); // a message sent elsewhere (another tab, the CLI) shows up
        break;
      case "TEXT_MESSAGE_START":
        state.live.set(ev.messageId, "");
        break;
      case "TEXT_MESSAGE_CONTENT":
        state.live.set(ev.messageId, (state.live.get(ev.messageId) || "") + (ev.delta || ""));
        renderTranscript();
        break;
      case "TEXT_MESSAGE_END":
        break;
      case "TOOL_CALL_START":
        state.liveNames.set(ev.toolCallId, ev.toolCallName);
        state.workingLabel = `working… (${ev.toolCallName})`;
        updateWorking();
        break;
      case "TOOL_CALL_ARGS":
      case "TOOL_CALL_END":
        break;
      case "TOOL_CALL_RESULT": {
        let envelope = null;
        try {
          envelope = typeof ev.content === "string" ? JSON.parse(ev.content) : ev.content;
        } catch {
          envelope = { status: "success", content: String(ev.content) };
        }
        state.liveResults.set(ev.toolCallId, {
          name: state.liveNames.get(ev.toolCallId),
          envelope,
        });
        renderTranscript();
        scheduleRefresh();
        break;
      }
      case "RUN_FINISHED":
      case "RUN_ERROR":
        state.running = false;
        state.workingLabel = "working…";
        updateWorking();
        scheduleRefresh();
        break;
      case "CUSTOM":
        scheduleRefresh();
        break;
      default:
        break;
    }
  }

  // ---------------------------------------------------------------- wiring

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
})();
