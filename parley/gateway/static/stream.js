// Live events: the conversation's AG-UI event stream (SSE over fetch), resumed with
// Last-Event-ID, and what each event changes on the page: a reply's text grows with
// each TEXT_MESSAGE_CONTENT as the model writes it, and leaves when its call is
// retried or cancelled (parley.stream_discarded).

import { conversationPath, errorOf, handleError } from "./api.js";
import { loadSnapshot, scheduleRefresh } from "./refresh.js";
import {
  $,
  isEnded,
  state,
  STREAM_404_RETRY_MS,
  STREAM_404_SENDING_RETRY_MS,
  STREAM_MAX_BACKOFF_MS,
} from "./state.js";
import { renderTranscript, updateWorking } from "./transcript.js";

// The CUSTOM event that withdraws a streamed message (parley/workflows/events.py).
const STREAM_DISCARDED = "parley.stream_discarded";

export function stopStream() {
  const s = state.stream;
  s.gen += 1;
  if (s.controller) s.controller.abort();
  s.controller = null;
  if (s.wake) s.wake();
  s.wake = null;
  setLive(false);
}

export function kickStream() {
  if (state.stream.wake) state.stream.wake();
}

export function setLive(on) {
  const dot = $("live");
  if (!dot) return;
  dot.classList.toggle("on", on);
  dot.title = on ? "Live updates connected" : "Live updates reconnecting…";
}

export function startStream(sid, lastId) {
  stopStream();
  const s = state.stream;
  const gen = s.gen;
  s.lastId = lastId;
  runStream(sid, gen);
}

export async function runStream(sid, gen) {
  const s = state.stream;
  let backoff = 1000;
  // A closed conversation has nothing more to say: no stream to follow.
  while (gen === s.gen && state.token && !isEnded(state.snapshot)) {
    const controller = new AbortController();
    s.controller = controller;
    const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
    if (s.lastId !== null && s.lastId !== undefined) headers["Last-Event-ID"] = s.lastId;
    let wait = backoff;
    let closed = false; // the gateway ended or refused the stream
    try {
      const res = await fetch(`${conversationPath(sid)}/events`, {
        headers,
        signal: controller.signal,
        cache: "no-store",
      });
      if (res.status === 404) {
        // Not created yet: try again quietly (soon while a message is starting it).
        wait = state.busy ? STREAM_404_SENDING_RETRY_MS : STREAM_404_RETRY_MS;
      } else if (res.status === 401) {
        if (gen === s.gen) handleError(await errorOf(res));
        return;
      } else if (!res.ok || !res.body) {
        if (res.status === 403) {
          if (gen === s.gen) handleError(await errorOf(res));
          return;
        }
        backoff = Math.min(backoff * 2, STREAM_MAX_BACKOFF_MS);
        closed = true;
      } else {
        setLive(true);
        backoff = 1000;
        await readEvents(res.body, gen);
        wait = 500; // the server closed a healthy stream: reconnect soon
        closed = true;
      }
    } catch {
      if (gen !== s.gen) return;
      backoff = Math.min(backoff * 2, STREAM_MAX_BACKOFF_MS);
    }
    if (gen !== s.gen) return;
    setLive(false);
    if (closed) {
      // The gateway ends a conversation's streams when it closes (ended, or terminated
      // with `end --force`): the snapshot says whether it has, before any reconnection.
      await loadSnapshot();
      if (gen !== s.gen || isEnded(state.snapshot)) return;
    } else if (state.running) {
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

export async function readEvents(body, gen) {
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

export function handleEvent(ev) {
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
      if (ev.name === STREAM_DISCARDED && ev.value && state.live.delete(ev.value.messageId)) {
        // A retried or cancelled model call: its partial text goes; the retry streams anew.
        renderTranscript();
      }
      scheduleRefresh();
      break;
    default:
      break;
  }
}
