// Signing in with an OpenID Connect provider, where the gateway has one (GET /auth/config):
// the authorization code flow with PKCE (S256) of a public client, in the browser alone.
//
// beginSignIn() keeps a random verifier and state in sessionStorage and goes to the
// provider's authorization endpoint; on the way back (`?code=…&state=…`) finishSignIn()
// checks the state, exchanges the code and the verifier at the token endpoint, and keeps
// the token the gateway takes (`bearer`: the ID token or the access token) in
// sessionStorage: it is the page's bearer token until the tab closes or the gateway
// refuses it (expired: EVENTS.UNAUTHORIZED, and the sign-in view offers the provider again).

import { state } from "./state.js";

export const OIDC_TOKEN_KEY = "parley.oidc.token";
const PENDING_KEY = "parley.oidc.pending";

let config = null;

// The provider's public settings from the gateway, or null (a token of the tokens file).
export async function loadOidcConfig() {
  try {
    const res = await fetch("/auth/config", { cache: "no-store" });
    const body = res.ok ? await res.json() : null;
    config = body && body.oidc && body.oidc.authorization_endpoint ? body.oidc : null;
  } catch {
    config = null;
  }
  return config;
}

export const oidcConfig = () => config;

function base64url(bytes) {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText(bytes) {
  const values = new Uint8Array(bytes);
  crypto.getRandomValues(values);
  return base64url(values);
}

async function challengeOf(verifier) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

const redirectUri = () => location.origin + location.pathname;

// Goes to the provider's sign-in page; it comes back to this page with a code.
export async function beginSignIn() {
  if (!config) return;
  const verifier = randomText(48);
  const expected = randomText(16);
  sessionStorage.setItem(
    PENDING_KEY,
    JSON.stringify({ verifier, state: expected, hash: location.hash }),
  );
  const url = new URL(config.authorization_endpoint);
  url.searchParams.set("response_type", "code");
  url.searchParams.set("client_id", config.client_id);
  url.searchParams.set("redirect_uri", redirectUri());
  url.searchParams.set("scope", config.scopes);
  url.searchParams.set("state", expected);
  url.searchParams.set("code_challenge", await challengeOf(verifier));
  url.searchParams.set("code_challenge_method", "S256");
  location.assign(url.toString());
}

function takePending() {
  let pending = null;
  try {
    pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) || "null");
  } catch {
    pending = null;
  }
  sessionStorage.removeItem(PENDING_KEY);
  return pending;
}

// Back from the provider: the code exchanged for a token, kept as the bearer. False when
// this page load is no return from the provider; an Error saying what failed otherwise.
export async function finishSignIn() {
  const params = new URLSearchParams(location.search);
  const code = params.get("code");
  const error = params.get("error");
  if (!config || (!code && !error)) return false;
  const pending = takePending();
  // The code and state leave the address bar (and the history) at once.
  history.replaceState(null, "", location.pathname + ((pending && pending.hash) || ""));
  if (error) {
    throw new Error(`The sign-in provider refused: ${params.get("error_description") || error}`);
  }
  if (!pending || pending.state !== params.get("state")) {
    throw new Error("This sign-in was not started by this page: sign in again.");
  }
  const body = new URLSearchParams({
    grant_type: "authorization_code",
    code,
    redirect_uri: redirectUri(),
    client_id: config.client_id,
    code_verifier: pending.verifier,
  });
  let res;
  try {
    res = await fetch(config.token_endpoint, { method: "POST", body, cache: "no-store" });
  } catch {
    throw new Error("The sign-in provider's token endpoint cannot be reached.");
  }
  let tokens = null;
  try {
    tokens = await res.json();
  } catch {
    tokens = null;
  }
  if (!res.ok || !tokens) {
    const why = (tokens && (tokens.error_description || tokens.error)) || `${res.status}`;
    throw new Error(`The sign-in provider did not give a token: ${why}`);
  }
  const token = tokens[config.bearer];
  if (typeof token !== "string" || !token) {
    throw new Error(`The sign-in provider's answer has no ${config.bearer}.`);
  }
  keepOidcToken(token);
  return true;
}

export function keepOidcToken(token) {
  try {
    sessionStorage.setItem(OIDC_TOKEN_KEY, token);
  } catch {
    /* private mode: keep it in memory only */
  }
  state.token = token;
}

export function storedOidcToken() {
  try {
    return sessionStorage.getItem(OIDC_TOKEN_KEY);
  } catch {
    return null;
  }
}

export function forgetOidcToken() {
  try {
    sessionStorage.removeItem(OIDC_TOKEN_KEY);
    sessionStorage.removeItem(PENDING_KEY);
  } catch {
    /* ignore */
  }
}
