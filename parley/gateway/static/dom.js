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
