// The gateway's REST API: requests with the bearer token, errors as ApiError. A refused
// token is announced (EVENTS.UNAUTHORIZED) for the sign-in view to handle.

import { showError } from "./dom.js";
import { emit, EVENTS } from "./events.js";
import { state } from "./state.js";

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export const UNREACHABLE =
  "The gateway is unreachable. Check that it is running and your connection, then try again.";

export async function errorOf(res) {
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

export async function api(method, path, body) {
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

export const conversationPath = (sid) => `/v1/conversations/${encodeURIComponent(sid)}`;

export function handleError(err) {
  if (err instanceof ApiError && err.status === 401) {
    emit(EVENTS.UNAUTHORIZED, err.message);
    return;
  }
  showError(err && err.message ? err.message : String(err));
}
