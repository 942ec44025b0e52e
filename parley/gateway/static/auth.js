// Signing in and out: the token from `#token=…` or the form, kept in localStorage; or
// from an OpenID Connect provider (oidc.js), kept in sessionStorage.

import { api, handleError } from "./api.js";
import { forgetOidcToken, oidcConfig } from "./oidc.js";
import { $, state, TOKEN_KEY } from "./state.js";
import { stopStream } from "./stream.js";

export function hashParams() {
  return new URLSearchParams(location.hash.replace(/^#/, ""));
}

// Takes a token from `#token=...` (and removes it from the address bar).
export function takeTokenFromHash() {
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

export function showTokenForm(hint) {
  $("app-view").hidden = true;
  $("token-view").hidden = false;
  $("sign-out").hidden = true;
  $("me").textContent = "";
  $("token-hint").hidden = !hint;
  $("token-hint").textContent = hint || "";
  $("oidc-sign-in").hidden = !oidcConfig();
  $("token-input").value = "";
  $("token-input").focus();
}

export function signOut(hint) {
  try {
    localStorage.removeItem(TOKEN_KEY);
  } catch {
    /* ignore */
  }
  forgetOidcToken();
  state.token = null;
  state.userId = null;
  state.started = false;
  stopStream();
  clearInterval(state.listTimer);
  state.sid = null;
  state.snapshot = null;
  showTokenForm(hint);
}

export async function loadMe() {
  try {
    const me = await api("GET", "/v1/me");
    state.userId = (me && me.user_id) || null;
    $("me").textContent = me && me.user_id ? `signed in as ${me.user_id}` : "";
    $("sign-out").hidden = false;
  } catch (err) {
    handleError(err);
  }
}
