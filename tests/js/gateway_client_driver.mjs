// Drive gateway/console/gateway-client.js on Node (with the `ws` package) from a test.
//
// Usage: node gateway_client_driver.mjs, then JSON lines on stdin:
//   first line, the config:
//     url        the gateway's base URL or its ws://.../v1/ws URL          (required)
//     token      a JWT; or tokens: [JWT, ...] handed out by getToken in turn (the last
//                one is repeated), which also turns on the refresh before expiry
//     auth       "subprotocol" (default) or "header"
//     backoff    {"minMs", "maxMs"}
//     cursors    {"<feed>": "E:O"} to resume from
//     feeds      [{"feed", "after"?}]: subscribed at start ("after": null = from the start)
//     timeout_ms overall bound (default 30000): on expiry exit 2
//   then commands, each answered by {"kind": "reply", "id", "ok", "value"|"error"}:
//     {"id", "cmd": "subscribe", "feed", "after"?}   {"id", "cmd": "unsubscribe", "feed"}
//     {"id", "cmd": "setToken", "token"}             {"id", "cmd": "status"}
//     {"id", "cmd": "close"}  (closes the client, replies with the status, exits 0)
//
// Output, one JSON object per line: {"kind": "event", feed, cursor, data, prelude} for
// every delivered event, {"kind": "<client event>", ...detail} for state, close,
// subscribed, restart, duplicate, error and token events, and the replies. "status" is
// {state, stats, cursors, feeds}.
import readline from "node:readline";
import WebSocket from "ws";
import { GatewayClient } from "../../gateway/console/gateway-client.js";

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const iterator = lines[Symbol.asyncIterator]();
const first = await iterator.next();
let config;
try {
  config = JSON.parse(first.value);
  if (typeof config.url !== "string") throw new Error("url is required");
} catch (err) {
  emit({ kind: "fatal", reason: "bad_config", message: String(err) });
  process.exit(5);
}

const timer = setTimeout(() => {
  emit({ kind: "fatal", reason: "timeout" });
  process.exit(2);
}, config.timeout_ms ?? 30000);

const options = {
  url: config.url,
  WebSocket,
  auth: config.auth ?? "subprotocol",
  backoff: config.backoff,
  cursors: config.cursors,
};
if (Array.isArray(config.tokens)) {
  let next = 0;
  options.getToken = async () => {
    const token = config.tokens[Math.min(next, config.tokens.length - 1)];
    next += 1;
    emit({ kind: "getToken", call: next });
    return token;
  };
} else {
  options.token = config.token;
}

const client = new GatewayClient(options);
for (const type of ["state", "close", "subscribed", "restart", "duplicate", "error", "token"]) {
  client.addEventListener(type, (e) => emit({ kind: type, ...e.detail }));
}

function follow(feed, after) {
  const opts = { onEvent: (ev) => emit({ kind: "event", ...ev }) };
  if (after !== undefined) opts.after = after;
  client.subscribe(feed, opts);
}

function status() {
  return { state: client.state, stats: client.stats, cursors: client.cursors(), feeds: client.feeds() };
}

for (const f of config.feeds ?? []) follow(f.feed, f.after);

for (;;) {
  const { value, done } = await iterator.next();
  if (done) break;
  if (!value.trim()) continue;
  let command;
  try {
    command = JSON.parse(value);
  } catch (err) {
    emit({ kind: "reply", id: null, ok: false, error: `not JSON: ${err}` });
    continue;
  }
  const { id, cmd } = command;
  try {
    let result = null;
    if (cmd === "subscribe") follow(command.feed, command.after);
    else if (cmd === "unsubscribe") client.unsubscribe(command.feed);
    else if (cmd === "setToken") client.setToken(command.token);
    else if (cmd === "status") result = status();
    else if (cmd === "close") {
      client.close();
      emit({ kind: "reply", id, ok: true, value: status() });
      break;
    } else throw new Error(`unknown command ${cmd}`);
    emit({ kind: "reply", id, ok: true, value: result });
  } catch (err) {
    emit({ kind: "reply", id, ok: false, error: String(err) });
  }
}
clearTimeout(timer);
process.stdout.write("", () => process.exit(0));
