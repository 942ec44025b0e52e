// The page's event bus: how a module tells the ones above it that something happened
// without importing them (which would make an import circle). app.js registers the
// listeners; the names are all here, and an unknown name is a mistake, not a no-op.

export const EVENTS = Object.freeze({
  UNAUTHORIZED: "unauthorized", // the gateway refused the token: (message)
  SNAPSHOT: "snapshot", // the open conversation's snapshot was read (or failed): render it
  CONVERSATIONS: "conversations", // the conversation list was read: render it
  OPEN: "open", // the reader asked to open a conversation: (sessionId)
  RETRY: "retry", // "try again from here" on a user message: (its index, its text)
});

const known = new Set(Object.values(EVENTS));
const listeners = new Map();

function check(name) {
  if (!known.has(name)) throw new Error(`unknown page event "${name}"`);
}

export function on(name, listener) {
  check(name);
  if (!listeners.has(name)) listeners.set(name, []);
  listeners.get(name).push(listener);
}

// Calls the listeners now, in the order they were registered, like the direct call it
// replaces. An event nobody listens to would be silently lost: say so in the console.
export function emit(name, ...args) {
  check(name);
  const heard = listeners.get(name) || [];
  if (!heard.length) console.error(`page event "${name}" has no listener`);
  for (const listener of heard) listener(...args);
}
