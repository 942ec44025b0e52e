// Runs a session of the official AG-UI HttpAgent (@ag-ui/client) against Parley's
// /agui: several runs, by one agent or by a new one (a page reload: an agent with the
// same threadId and no messages), and prints what each saw, one JSON object a line:
//   {"step": i, "event": <the AG-UI event>}                      each event dispatched
//   {"step": i, "messages": [...], "pendingInterrupts": [...]}   when the run ends
//   {"step": i, "error": "..."}                                  a run the agent failed
//
// Usage: node agui_session.mjs URL TOKEN THREAD_ID STEPS_JSON
// STEPS_JSON is a list of steps: {"agent": name, "runId": id, and one of
//   "text": a user message to add and run (with "context" and "state" if given),
//   "toolResult": text answering every tool call of the agent's last assistant message,
//   "resume": "approve" | "reject" (every pending interrupt of that agent),
//   nothing: run with what the agent holds (a reloaded agent: no messages)};
// "tools" (front-end tools) and "forwardedProps" may go with any step.
import { HttpAgent } from "@ag-ui/client";

const [url, token, threadId, stepsJson] = process.argv.slice(2);
if (!url || !token || !threadId || !stepsJson) {
  console.error("usage: node agui_session.mjs URL TOKEN THREAD_ID STEPS_JSON");
  process.exit(2);
}
const print = (record) => process.stdout.write(JSON.stringify(record) + "\n");
const agents = new Map();
const agentNamed = (name) => {
  if (!agents.has(name)) {
    agents.set(name, new HttpAgent({ url, threadId, headers: { Authorization: `Bearer ${token}` } }));
  }
  return agents.get(name);
};

const steps = JSON.parse(stepsJson);
for (const [step, spec] of steps.entries()) {
  const agent = agentNamed(spec.agent);
  const parameters = { runId: spec.runId };
  if (spec.text !== undefined) {
    agent.addMessage({ id: `user-${spec.runId}`, role: "user", content: spec.text });
  }
  if (spec.toolResult !== undefined) {
    // The front end ran its tool: answer every call of the agent's last message.
    const last = [...agent.messages].reverse().find((m) => m.role === "assistant");
    for (const call of last?.toolCalls ?? []) {
      agent.addMessage({ id: `tool-${call.id}`, role: "tool", toolCallId: call.id, content: spec.toolResult });
    }
  }
  if (spec.tools) parameters.tools = spec.tools;
  if (spec.forwardedProps) parameters.forwardedProps = spec.forwardedProps;
  if (spec.context) parameters.context = spec.context;
  if (spec.state) agent.setState(spec.state);
  if (spec.resume) {
    const payload = spec.resume === "approve" ? { action: "approve" } : { action: "reject", message: "not now" };
    parameters.resume = agent.pendingInterrupts.map((interrupt) => ({
      interruptId: interrupt.id,
      status: "resolved",
      payload,
    }));
  }
  try {
    await agent.runAgent(parameters, { onEvent({ event }) { print({ step, event }); } });
    print({ step, messages: agent.messages, pendingInterrupts: agent.pendingInterrupts });
  } catch (error) {
    print({ step, error: String(error?.message ?? error) });
  }
}
