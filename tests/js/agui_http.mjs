// An unmodified AG-UI HttpAgent (@ag-ui/client) attaching to runs through the gateway's
// POST /v1/ui/ag-ui/{agent} route, from the start or resuming with Last-Event-ID.
// argv: <base url> <token> <thread id> <run id>
// stdin: {"cursors": [null | "E:O", ...]}  (null: from the start)
// stdout: one JSON line per event seen of the first attach ({"event": type}) when
// --live is given, then a final line {"results": [{ok, messages, state, events} | {ok:false, error}]}
import { HttpAgent } from "@ag-ui/client";

process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "true";
const [base, token, threadId, runId, live] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.error("agui_http.mjs: timed out");
  process.exit(3);
}, 60_000);

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { cursors } = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const results = [];
const realError = console.error;
for (const cursor of cursors) {
  const headers = { Authorization: `Bearer ${token}` };
  if (cursor !== null) headers["Last-Event-ID"] = cursor;
  const agent = new HttpAgent({ url: `${base}/v1/ui/ag-ui/any-agent`, headers, threadId });
  let events = 0;
  const subscriber = {
    onEvent: ({ event }) => {
      events += 1;
      if (live === "--live") process.stdout.write(JSON.stringify({ event: event.type }) + "\n");
    },
  };
  console.error = () => {};
  try {
    await agent.runAgent({ runId }, subscriber);
    results.push({ ok: true, messages: agent.messages, state: agent.state, events });
  } catch (err) {
    results.push({ ok: false, error: String(err && err.message ? err.message : err) });
  } finally {
    console.error = realError;
  }
}
process.stdout.write(JSON.stringify({ results }) + "\n");
clearTimeout(timer);
