// Runs the official AG-UI HttpAgent (@ag-ui/client) once against Parley's /agui and
// prints what it saw, one JSON object a line, as it sees it:
//   {"at": <seconds>, "event": <the AG-UI event>}   for each event the agent dispatches
//   {"at": <seconds>, "messages": [...]}             the agent's messages when the run ends
// "at" is CLOCK_MONOTONIC (process.hrtime), the clock of Python's time.monotonic() on
// Linux, so a test can compare it with the provider's write times.
//
// Usage: node agui_run.mjs URL TOKEN THREAD_ID TEXT
// A failed run prints one line on stderr and exits 1.
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId, text] = process.argv.slice(2);
if (!url || !token || !threadId || text === undefined) {
  console.error("usage: node agui_run.mjs URL TOKEN THREAD_ID TEXT");
  process.exit(2);
}

const now = () => Number(process.hrtime.bigint()) / 1e9;
const print = (record) => process.stdout.write(JSON.stringify({ at: now(), ...record }) + "\n");

const agent = new HttpAgent({
  url,
  threadId,
  headers: { Authorization: `Bearer ${token}` },
});
agent.addMessage({ id: `user-${threadId}`, role: "user", content: text });

try {
  await agent.runAgent(
    { runId: `run-${threadId}` },
    {
      onEvent({ event }) {
        print({ event });
      },
    },
  );
  print({ messages: agent.messages });
} catch (error) {
  console.error(`agui_run: ${error?.message ?? error}`);
  process.exit(1);
}
