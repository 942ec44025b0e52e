// Building DOM nodes from untrusted text (textContent and attributes only, never
// innerHTML), formatting, and the error banner.

import { $ } from "./state.js";

export function el(tag, attrs, ...children) {
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

export function randomId() {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return "web-" + Array.from(bytes, (b) => alphabet[b % alphabet.length]).join("");
}

export function textOf(content) {
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

export function compactJSON(value, limit) {
  let text;
  try {
    text = JSON.stringify(value ?? {});
  } catch {
    text = String(value);
  }
  return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}

export const statusText = (status) => String(status || "").replace(/_/g, " ");

export function relativeTime(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 45) return "just now";
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}

export function expiryText(iso) {
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

export function showError(message) {
  $("error-text").textContent = message;
  $("error").hidden = false;
}

export function clearError() {
  $("error").hidden = true;
  $("error-text").textContent = "";
}

// "escalated by judge: unknown target": the verdict of the call's judge, as `parley show`
// says it, on a card and under a result (JudgeVerdict.label in parley/contracts/judging.py: change both together).
export function judgedText(judged) {
  if (judged.outcome === "opinion") return `judge's opinion (not an approval here): approve: ${judged.reason}`;
  if (judged.failed) return `no verdict from the judge: ${judged.reason}`;
  if (judged.outcome === "stale") return `the judge's ${judged.verdict} was of other arguments; a person decides`;
  const said = { approve: "approved", deny: "denied", escalate: "escalated" }[judged.verdict];
  return `${said} by judge: ${judged.reason}`;
}

// A pending call's preview (what it would change) as lines, the way `parley show` prints
// it (parley/client/previews.py: change both together): a dict's keys one per line, a
// list as bullets, long text cut. Text only: the data comes from a tool.
const PREVIEW_TEXT = 200;
const PREVIEW_ITEMS = 20;

export function previewLines(preview) {
  if (preview.status === "failed") {
    return [{ text: `preview: could not be computed (${preview.error || "no reason given"})`, kind: "failed" }];
  }
  const data = preview.data;
  const refused = isDict(data) && typeof data.refused === "string" ? data.refused : null;
  const head = refused ? { text: `preview: REFUSED ${refused}`, kind: "refused" } : { text: "preview:", kind: "head" };
  const lines = [head];
  if (preview.truncated) {
    const size = preview.data_bytes ? `${preview.data_bytes.toLocaleString("en-US")} bytes` : "more";
    lines.push({ text: `  (cut: its JSON is ${size}; the beginning shown)`, kind: "note" });
  }
  let texts;
  if (isDict(data)) {
    const shown = Object.fromEntries(Object.entries(data).filter(([k]) => !(refused && k === "refused")));
    texts = dictLines(shown, 1);
  } else texts = valueLines(data, 1);
  return lines.concat(texts.map((text) => ({ text, kind: "data" })));
}

// The preview under a card's arguments: open, its heading the first line (a refused or
// failed one styled so it cannot be missed), its lines in a block that wraps on a phone.
export function previewBlock(preview) {
  const [head, ...rest] = previewLines(preview);
  const kind = head.kind === "head" ? "ok" : head.kind;
  return el(
    "details",
    { class: `preview preview-${kind}`, open: true, "data-testid": "preview", "data-preview-hash": preview.hash },
    el("summary", { class: "preview-head", text: "Preview: " + (head.text.slice(9) || "what it would change") }),
    rest.length ? el("pre", { class: "preview-body", text: rest.map((l) => l.text.slice(2)).join("\n") }) : null,
  );
}

const isDict = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const isEmpty = (v) => (Array.isArray(v) ? v.length === 0 : isDict(v) && Object.keys(v).length === 0);

function dictLines(data, depth) {
  const pad = "  ".repeat(depth);
  const lines = [];
  for (const [key, value] of Object.entries(data)) {
    if (isDict(value) && !isEmpty(value)) lines.push(`${pad}${key}:`, ...dictLines(value, depth + 1));
    else if (Array.isArray(value) && value.length) lines.push(`${pad}${key}:`, ...listLines(value, depth + 1));
    else lines.push(`${pad}${key}: ${scalarText(value)}`);
  }
  return lines;
}

function listLines(items, depth) {
  const pad = "  ".repeat(depth);
  const lines = items.slice(0, PREVIEW_ITEMS).map((item) => `${pad}- ${cut(inline(item))}`);
  if (items.length > PREVIEW_ITEMS) lines.push(`${pad}… and ${items.length - PREVIEW_ITEMS} more`);
  return lines;
}

function valueLines(value, depth) {
  if (isDict(value) && !isEmpty(value)) return dictLines(value, depth);
  if (Array.isArray(value) && value.length) return listLines(value, depth);
  return ["  ".repeat(depth) + scalarText(value)];
}

function inline(value) {
  if (isDict(value)) return Object.entries(value).map(([k, v]) => `${k}: ${inlineScalar(v)}`).join(", ");
  return inlineScalar(value);
}

function inlineScalar(value) {
  if (value !== null && typeof value === "object") return isEmpty(value) ? "(none)" : JSON.stringify(value);
  return flat(value);
}

function scalarText(value) {
  if (value !== null && typeof value === "object") return isEmpty(value) ? "(none)" : cut(JSON.stringify(value));
  return cut(flat(value));
}

function flat(value) {
  if (value === null || value === undefined) return "(none)";
  if (value === "") return "(empty)";
  if (typeof value === "boolean") return value ? "yes" : "no";
  return typeof value === "string" ? value.split(/\r\n|\r|\n/).join(" ↵ ") : String(value);
}

function cut(text) {
  if (text.length <= PREVIEW_TEXT) return text;
  return `${text.slice(0, PREVIEW_TEXT)}… (${(text.length - PREVIEW_TEXT).toLocaleString("en-US")} more characters)`;
}
