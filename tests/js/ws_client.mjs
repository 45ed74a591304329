// A gateway.v1 WebSocket client on the real `ws` package (decisions D6), for the tests.
//
// Usage: node ws_client.mjs '<config JSON>'   or   echo '<config JSON>' | node ws_client.mjs
//
// Config:
//   url          ws://host:port/v1/ws                          (required)
//   token        the JWT                                       (required unless auth is "none")
//   auth         "header" (Authorization: Bearer, default), "subprotocol" (bearer.<JWT>), "none"
//   feeds        [{"feed": "team/<id>", "after": "E:O"?}, ...]  subscribed in this order
//   stop         {"event": N, "error": M, ...}: stop (close 1000, exit 0) once at least that many
//                frames of each type have arrived; {} never stops on counts
//   until_close  true: wait for the server to close the socket (exit 0 when it does)
//   timeout_ms   overall bound (default 10000): on expiry exit 2
//
// Output: one JSON object per line on stdout, so a caller can follow along:
//   {"kind":"open","protocol":"gateway.v1"}
//   {"kind":"frame","frame":{...}}                 every frame received, in order
//   {"kind":"ready"}                               every feed answered (subscribed or error)
//   {"kind":"result", ...}                         last line: everything, see finish()
// Exit codes: 0 done, 2 timeout, 3 the server closed before the stop counts were reached,
// 4 connection failed or wrong subprotocol, 5 bad config.
import WebSocket from "ws";

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function readConfig() {
  if (process.argv[2]) return JSON.parse(process.argv[2]);
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

let config;
try {
  config = await readConfig();
  if (typeof config.url !== "string") throw new Error("url is required");
} catch (err) {
  emit({ kind: "result", ok: false, reason: "bad_config", message: String(err) });
  process.exit(5);
}

const feeds = config.feeds ?? [];
const stop = config.stop ?? {};
const authMode = config.auth ?? "header";
const timeoutMs = config.timeout_ms ?? 10000;

const protocols = ["gateway.v1"];
const options = { perMessageDeflate: false, handshakeTimeout: timeoutMs };
if (authMode === "subprotocol") protocols.push("bearer." + config.token);
else if (authMode === "header") options.headers = { Authorization: `Bearer ${config.token}` };

const frames = [];
const counts = {};
const answered = new Set();
const feedNames = new Set(feeds.map((f) => f.feed));
let protocol = null;
let httpError = null;
let close = null;
let closingByUs = false;
let finished = false;

function countsReached() {
  const wanted = Object.entries(stop);
  return wanted.length > 0 && wanted.every(([type, n]) => (counts[type] ?? 0) >= n);
}

function finish(ok, reason, exitCode, extra = {}) {
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  emit({
    kind: "result",
    ok,
    reason,
    protocol,
    http_error: httpError,
    frames,
    events: frames.filter((f) => f.type === "event"),
    counts,
    close,
    ...extra,
  });
  // Let stdout drain before exiting.
  process.stdout.write("", () => process.exit(exitCode));
}

const timer = setTimeout(() => {
  try {
    socket.terminate();
  } catch {}
  finish(false, "timeout", 2);
}, timeoutMs);

const socket = new WebSocket(config.url, protocols, options);

socket.on("unexpected-response", (req, res) => {
  let body = "";
  res.setEncoding("utf8");
  res.on("data", (d) => (body += d));
  res.on("end", () => {
    httpError = { status: res.statusCode, body };
    finish(false, "http_error", 4);
  });
});

socket.on("error", (err) => {
  if (!httpError) finish(false, "socket_error", 4, { message: String(err) });
});

socket.on("open", () => {
  protocol = socket.protocol;
  emit({ kind: "open", protocol });
  if (protocol !== "gateway.v1") {
    socket.terminate();
    finish(false, "wrong_subprotocol", 4);
    return;
  }
  for (const f of feeds) {
    const msg = { type: "subscribe", feed: f.feed };
    if (f.after !== undefined && f.after !== null) msg.after = f.after;
    socket.send(JSON.stringify(msg));
  }
  if (feeds.length === 0) emit({ kind: "ready" });
});

socket.on("message", (data, isBinary) => {
  let frame;
  try {
    frame = JSON.parse(data.toString("utf8"));
  } catch {
    frame = { type: "unparsable", raw: data.toString("utf8"), binary: isBinary };
  }
  frames.push(frame);
  counts[frame.type] = (counts[frame.type] ?? 0) + 1;
  emit({ kind: "frame", frame });
  if ((frame.type === "subscribed" || frame.type === "error") && frame.feed !== undefined) {
    const before = answered.size;
    answered.add(frame.feed);
    if (before < feedNames.size && answered.size >= feedNames.size) emit({ kind: "ready" });
  }
  if (!closingByUs && !config.until_close && countsReached()) {
    closingByUs = true;
    socket.close(1000, "done");
    // Bounded: if the close handshake does not complete, finish anyway.
    setTimeout(() => finish(true, "done", 0), 2000).unref();
  }
});

socket.on("close", (code, reason) => {
  close = { code, reason: reason.toString("utf8"), by: closingByUs ? "client" : "server" };
  if (closingByUs) finish(true, "done", 0);
  else if (config.until_close) finish(true, "closed", 0);
  else finish(false, "closed_early", 3);
});
