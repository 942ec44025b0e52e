// Remembered decisions (grants): the conversation view's "Remembered decisions" list and
// what a card needs to give one. The list is drawn from each snapshot's `remembered`
// (so it is fresh whenever the snapshot is read again): each grant's tool, its call's
// arguments, approve or reject, who gave it, since and until when (or "this
// conversation"), and what it was given for (the MCP server's name@version, the policy
// file's and the tool's versions, short). Revoke calls DELETE …/grants/{id}, and the
// row says "revoked" only when that route answers so. On a card: "Approve and remember"
// with a lifetime (this conversation, 1 hour, 1 day: remember + remember_seconds), for
// the owner and reviewers only (the gate refuses remember from the person a call was
// escalated to); and a call asked again because its grant lapsed says why.

import { api, conversationPath, handleError } from "./api.js";
import { el } from "./dom.js";
import { loadSnapshot } from "./refresh.js";
import { $, isEnded, state } from "./state.js";

const rows = new Map(); // grant id -> row, of the conversation `shownFor`
let shownFor = null;

// The lifetimes a card offers ("": the rest of the conversation, or the policy file's
// own lifetime; the file's maximum shortens any: the list shows the real end).
export const LIFETIMES = [
  ["", "for this conversation"],
  ["3600", "for 1 hour"],
  ["86400", "for 1 day"],
];

// An instant as the CLI writes a grant's: "2026-12-07 15:40:12 UTC".
export function utc(iso) {
  const t = Date.parse(iso || "");
  if (Number.isNaN(t)) return "-";
  return new Date(t).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

// "stamp {"text":"x"}": the call's shape; its tool, and its arguments apart.
export function shapeParts(grant) {
  const shape = String(grant.shape || "");
  const cut = shape.indexOf(" ");
  const tool = grant.tool || (cut < 0 ? shape : shape.slice(0, cut));
  return { tool, args: cut < 0 ? "" : shape.slice(cut + 1) };
}

export function lifetimeText(grant, now = Date.now()) {
  const since = grant.granted_at ? `since ${utc(grant.granted_at)}` : "since before grants recorded it";
  if (!grant.expires_at) return `${since}, for this conversation`;
  const ended = Date.parse(grant.expires_at) <= now;
  return `${since}, ${ended ? "ended" : "until"} ${utc(grant.expires_at)}`;
}

export function givenForText(grant) {
  if (!grant.granted_at && !grant.spec_hash && !grant.policy_version) {
    return "given before grants recorded what for: it holds as it did";
  }
  const parts = [grant.server ? `MCP server ${grant.server}` : "a built-in tool"];
  if (grant.policy_version) parts.push(`policy ${String(grant.policy_version).slice(0, 8)}`);
  if (grant.spec_hash) parts.push(`tool ${String(grant.spec_hash).slice(0, 8)}`);
  return `given for ${parts.join(", ")}`;
}

export function renderGrants(snap) {
  if (shownFor !== state.sid) {
    for (const row of rows.values()) row.remove();
    rows.clear();
    shownFor = state.sid;
  }
  // A closed conversation runs no more calls: nothing of it to revoke.
  const grants = (snap && !isEnded(snap) && snap.remembered) || [];
  const ids = new Set(grants.map((g) => g.tool_call_id));
  for (const [id, row] of rows) {
    if (!ids.has(id) && row.dataset.state !== "revoked") {
      row.remove();
      rows.delete(id);
    }
  }
  const list = $("grants-list");
  for (const g of grants) {
    let row = rows.get(g.tool_call_id);
    const sig = JSON.stringify(g);
    if (row && row._parley.sig !== sig) {
      row.remove();
      row = null;
    }
    if (!row) {
      row = buildRow(g);
      row._parley.sig = sig;
      rows.set(g.tool_call_id, row);
    }
    list.append(row); // keeps the snapshot's order (oldest first); revoked rows last
  }
  for (const row of rows.values()) if (row.dataset.state === "revoked") list.append(row);
  $("grants").hidden = rows.size === 0;
  $("grants-count").textContent = String(grants.length);
}

function buildRow(g) {
  const { tool, args } = shapeParts(g);
  const approve = g.policy === "auto";
  const ended = Boolean(g.expires_at) && Date.parse(g.expires_at) <= Date.now();
  const revoke = el("button", {
    type: "button",
    class: "reject revoke",
    "data-testid": "revoke",
    text: "Revoke",
    title: "Forget this decision: the next identical call waits for a decision",
  });
  const note = el("span", { class: "grant-note", "data-testid": "grant-note", "aria-live": "polite" });
  const row = el(
    "li",
    {
      class: "grant" + (ended ? " ended" : ""),
      "data-testid": "grant",
      "data-grant-id": g.tool_call_id,
      "data-state": ended ? "ended" : "active",
    },
    el(
      "div",
      { class: "grant-body" },
      el(
        "div",
        { class: "grant-head" },
        el("span", {
          class: "badge grant-policy " + (approve ? "approve" : "reject"),
          "data-testid": "grant-policy",
          text: approve ? "approve" : "reject",
        }),
        el("span", { class: "tool-name", "data-testid": "grant-tool", text: tool }),
        el("code", { class: "grant-args", "data-testid": "grant-args", text: args, title: g.shape }),
      ),
      el("div", { class: "small muted", "data-testid": "grant-when" }, `by ${g.decided_by}, ${lifetimeText(g)}`),
      el("div", { class: "small muted", "data-testid": "grant-for", text: givenForText(g) }),
      note,
    ),
    revoke,
  );
  row._parley = { revoke, note };
  revoke.addEventListener("click", () => revokeGrant(row, g.tool_call_id));
  return row;
}

async function revokeGrant(row, grantId) {
  const sid = state.sid;
  const ui = row._parley;
  ui.revoke.disabled = true;
  ui.note.textContent = "revoking…";
  try {
    const path = `${conversationPath(sid)}/grants/${encodeURIComponent(grantId)}`;
    const done = await api("DELETE", path);
    if (done && done.revoked && done.revoked.id === grantId) {
      row.dataset.state = "revoked";
      row.classList.add("revoked");
      ui.note.textContent = "revoked: the next identical call waits for a decision";
      ui.revoke.hidden = true;
    } else {
      ui.note.textContent = "";
      ui.revoke.disabled = false;
    }
  } catch (err) {
    ui.note.textContent = "";
    ui.revoke.disabled = false;
    handleError(err);
  } finally {
    if (state.sid === sid) loadSnapshot();
  }
}

// The gate takes remember from the conversation's owner and reviewers, never from the
// person a call was escalated to, whose snapshot holds their calls and no transcript.
export function mayRemember() {
  const snap = state.snapshot;
  if (!snap) return false;
  return (state.userId && state.userId === snap.user_id) || (snap.transcript_total || 0) > 0;
}

// "Approve and remember [for 1 hour]": the button and the lifetime it sends.
export function rememberControls(p) {
  const button = el("button", {
    type: "button",
    class: "approve remember",
    "data-testid": "approve-remember",
    text: "Approve and remember",
    title: "Approve, and approve later calls of this tool with these same arguments without asking",
  });
  const lifetime = el(
    "select",
    {
      class: "remember-for",
      "data-testid": "remember-for",
      "aria-label": `How long to remember the approval of ${p.name}`,
      title: "The policy file may shorten it: the Remembered decisions list shows until when",
    },
    ...LIFETIMES.map(([value, label]) => el("option", { value, text: label })),
  );
  return { button, lifetime, row: el("div", { class: "card-actions remember-row" }, button, lifetime) };
}

// The decision "Approve and remember" sends, from the approval the card would send.
export function remembered(decision, lifetime) {
  const seconds = lifetime && lifetime.value ? Number(lifetime.value) : null;
  return seconds ? { ...decision, remember: true, remember_seconds: seconds } : { ...decision, remember: true };
}

// Why the call waits. A grant that no longer holds says so apart ("asked again: …").
export function reasonMark(p) {
  if (!p.reason) return null;
  if (p.reason.startsWith("asked again:")) {
    return el("p", { class: "small asked-again", "data-testid": "asked-again", text: p.reason });
  }
  return el("p", { class: "small muted reason", text: "Needs approval: " + p.reason });
}
