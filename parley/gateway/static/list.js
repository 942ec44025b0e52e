// The conversation list in the sidebar (read by refresh.js). A click asks for the
// conversation to be opened (EVENTS.OPEN): opening it is conversation.js's job.

import { el, relativeTime, statusText } from "./dom.js";
import { emit, EVENTS } from "./events.js";
import { scheduleRefresh } from "./refresh.js";
import { $, state } from "./state.js";

export function renderList() {
  const list = $("conversations");
  const items = state.conversations.slice();
  // The list (Temporal's visibility) may be first to know the open conversation has
  // closed (`end --force` sends it no event): then its snapshot is read again.
  const listed = items.find((c) => c.session_id === state.sid);
  const stale = listed && listed.status === "ended" && state.snapshot && state.snapshot.status !== "ended";
  if (stale && state.endedRefreshFor !== state.sid) {
    state.endedRefreshFor = state.sid; // once: a snapshot that disagrees is not asked again
    scheduleRefresh(0);
  }
  if (state.sid && !items.some((c) => c.session_id === state.sid)) {
    items.unshift({ session_id: state.sid, status: "new", pending_tools: [] });
  }
  list.replaceChildren(
    ...items.map((listed) => {
      const c = listed.session_id === state.sid ? asOpen(listed) : listed;
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
      button.addEventListener("click", () => emit(EVENTS.OPEN, c.session_id));
      return el("li", {}, button);
    }),
  );
  $("list-empty").hidden = items.length > 0;
}

// The open conversation's row says what its header says. Temporal's visibility (the
// list) lags behind the conversation, never publishes `running` (a status that lasts
// seconds would cost two history events per turn: workflows/record/publishing.py), and knows
// nothing of a conversation it has not indexed yet; the snapshot is the conversation's
// own word, read after every change the page sees.
function asOpen(listed) {
  const snap = state.snapshot;
  if (!snap || snap.session_id !== listed.session_id) return listed;
  const pendingTools = [...new Set((snap.pending || []).map((p) => p.name))].sort();
  return { ...listed, status: snap.status, pending_tools: pendingTools };
}
