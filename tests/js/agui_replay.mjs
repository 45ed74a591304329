// Replays AG-UI event streams through the real @ag-ui/client pipeline (chunk transform,
// event verification, applying events to messages and state), without a network.
// stdin: {"streams": {"<name>": [event, ...], ...}}
// stdout: {"<name>": {"ok": true, "messages": [...], "state": ...} | {"ok": false, "error": "..."}}
import { AbstractAgent } from "@ag-ui/client";
import { from } from "rxjs";

process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "true";

class Replay extends AbstractAgent {
  constructor(events) {
    super({ threadId: "replay" });
    this.events = events;
  }
  run() {
    return from(this.events);
  }
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { streams } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const out = {};
const realError = console.error;
for (const [name, events] of Object.entries(streams)) {
  const agent = new Replay(events);
  console.error = () => {}; // runAgent logs the failure it rethrows
  try {
    await agent.runAgent({ runId: "replay" });
    out[name] = { ok: true, messages: agent.messages, state: agent.state };
  } catch (err) {
    out[name] = { ok: false, error: String(err && err.message ? err.message : err) };
  } finally {
    console.error = realError;
  }
}
process.stdout.write(JSON.stringify(out));
