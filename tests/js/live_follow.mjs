// Real clients following a gateway node's streams while the test publishes: the AI SDK's
// readUIMessageStream (through DefaultChatTransport.reconnectToStream), @ag-ui/client's
// HttpAgent, eventsource's EventSource and a `ws` WebSocket (gateway.v1).  Each reports
// what it received as it comes, so the test can publish the next step only once the
// node has delivered the last one, and what it ended with.
//
// Usage: node live_follow.mjs, then JSON lines on stdin (tests/support/jsprocess.py):
//   first line, the config: {"timeout_ms"?}
//   then commands, each answered by {"kind": "reply", "id", "ok", "value"|"error"}:
//     {"cmd": "ai_sdk", "name", "url", "token"}: reconnectToStream on `url` (a GET); replies
//         once the response is there with {status, header, contentType, stream}; every chunk
//         is printed as {"kind": "chunk", "name", "chunk"} as the client parses it
//     {"cmd": "agui", "name", "url", "token", "threadId", "runId"}: HttpAgent.runAgent on
//         `url` (POST); replies at once; every event as {"kind": "event", "name", "event"}
//     {"cmd": "sse", "name", "url", "token", "stop"}: an EventSource on `url`; every message
//         as {"kind": "message", "name", "id", "data"}.  With stop {"count": N} it closes
//         after the N-th message; with {"type": T} it waits, after the message whose
//         data's "type" (or "kind") is T, for the server to end the stream, then closes
//         (before the EventSource would reconnect).  An end or error before that is
//         reported in `errors`, and the source closed at once
//     {"cmd": "ws", "name", "url", "token", "subscribe", "stop": {"count": N}}: a socket
//         that sends `subscribe` once open; every frame as {"kind": "frame", "name",
//         "frame"}; it closes (1000) after the N-th event frame
//     {"cmd": "finish", "name"}: waits for that client's end and replies with it:
//         ai_sdk {message, errors, chunks, raw}; agui {ok, error?, events, messages, state};
//         sse {messages, opens, errors, ended: "server" | "client" | "error"};
//         ws {frames, close}
import readline from "node:readline";
import { HttpAgent } from "@ag-ui/client";
import { DefaultChatTransport, readUIMessageStream } from "ai";
import { EventSource } from "eventsource";
import WebSocket from "ws";

process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "true";

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

function describe(err) {
  return { name: String(err?.name ?? "Error"), message: String(err?.message ?? err) };
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const iterator = lines[Symbol.asyncIterator]();
const config = JSON.parse((await iterator.next()).value);
const timer = setTimeout(() => {
  emit({ kind: "fatal", reason: "timeout" });
  process.exit(2);
}, config.timeout_ms ?? 60000);

const clients = new Map();

// The AI SDK client: the transport's own fetch, tapped for the raw body (to tell a stream
// that ended with `data: [DONE]` from one cut short: the client parses both quietly).
async function ai_sdk({ name, url, token }) {
  let response = null;
  let raw = "";
  const decoder = new TextDecoder();
  const tappedFetch = async (input, init) => {
    const got = await fetch(input, init);
    response = {
      status: got.status,
      header: got.headers.get("x-vercel-ai-ui-message-stream"),
      contentType: got.headers.get("content-type"),
    };
    if (!got.body) return got;
    const tap = new TransformStream({
      transform(bytes, controller) {
        raw += decoder.decode(bytes, { stream: true });
        controller.enqueue(bytes);
      },
    });
    return new Response(got.body.pipeThrough(tap), {
      status: got.status,
      statusText: got.statusText,
      headers: got.headers,
    });
  };
  const headers = { Authorization: `Bearer ${token}` };
  const transport = new DefaultChatTransport({
    api: "http://unused.invalid",
    headers,
    fetch: tappedFetch,
    prepareReconnectToStreamRequest: () => ({ api: url, headers }),
  });
  const stream = await transport.reconnectToStream({ chatId: name });
  const errors = [];
  const chunks = [];
  let done = Promise.resolve({ message: null, errors, chunks, raw });
  if (stream !== null) {
    const seen = stream.pipeThrough(
      new TransformStream({
        transform(chunk, controller) {
          chunks.push(structuredClone(chunk)); // the client may change it later
          emit({ kind: "chunk", name, chunk });
          controller.enqueue(chunk);
        },
      }),
    );
    done = (async () => {
      let message = null;
      try {
        for await (const snapshot of readUIMessageStream({
          stream: seen,
          onError: (err) => errors.push(describe(err)),
        })) {
          message = snapshot;
        }
      } catch (err) {
        errors.push(describe(err));
      }
      return { message, errors, chunks, raw };
    })();
  }
  clients.set(name, done);
  return { ...response, stream: stream !== null };
}

function agui({ name, url, token, threadId, runId }) {
  const agent = new HttpAgent({ url, headers: { Authorization: `Bearer ${token}` }, threadId });
  const events = [];
  const subscriber = {
    onEvent: ({ event }) => {
      events.push(event.type);
      emit({ kind: "event", name, event: event.type });
    },
  };
  const done = agent.runAgent({ runId }, subscriber).then(
    () => ({ ok: true, events, messages: agent.messages, state: agent.state }),
    (err) => ({ ok: false, error: describe(err), events }),
  );
  clients.set(name, done);
  return {};
}

function sse({ name, url, token, stop }) {
  const messages = [];
  const errors = [];
  let opens = 0;
  let last = false;
  let resolve;
  const done = new Promise((r) => (resolve = r));
  const source = new EventSource(url, {
    fetch: (input, init) =>
      fetch(input, { ...init, headers: { ...init.headers, Authorization: `Bearer ${token}` } }),
  });
  const end = (ended) => {
    source.close();
    resolve({ messages, opens, errors, ended });
  };
  source.onopen = () => {
    opens += 1;
  };
  source.onerror = (err) => {
    if (last) {
      end("server"); // the stream's end, after its last message
      return;
    }
    errors.push({ message: String(err?.message ?? "error"), code: err?.code ?? null });
    end("error");
  };
  source.onmessage = (event) => {
    const data = JSON.parse(event.data);
    messages.push({ id: event.lastEventId, data });
    emit({ kind: "message", name, id: event.lastEventId, data });
    if (stop.count !== undefined) {
      if (messages.length >= stop.count) end("client");
    } else if (data?.type === stop.type || data?.kind === stop.type) {
      last = true;
    }
  };
  clients.set(name, done);
  return {};
}

function ws({ name, url, token, subscribe, stop }) {
  const frames = [];
  let events = 0;
  let resolve;
  const done = new Promise((r) => (resolve = r));
  let closingByUs = false;
  const socket = new WebSocket(url, ["gateway.v1"], {
    headers: { Authorization: `Bearer ${token}` },
    perMessageDeflate: false,
  });
  socket.on("open", () => socket.send(JSON.stringify({ type: "subscribe", ...subscribe })));
  socket.on("message", (data) => {
    const frame = JSON.parse(data.toString("utf8"));
    frames.push(frame);
    emit({ kind: "frame", name, frame });
    if (frame.type === "event") events += 1;
    if (!closingByUs && events >= stop.count) {
      closingByUs = true;
      socket.close(1000, "done");
    }
  });
  socket.on("error", (err) => resolve({ frames, close: null, error: describe(err) }));
  socket.on("close", (code, reason) => {
    const by = closingByUs ? "client" : "server";
    resolve({ frames, close: { code, reason: reason.toString("utf8"), by } });
  });
  clients.set(name, done);
  return {};
}

async function handle(message) {
  const { cmd } = message;
  if (cmd === "ai_sdk") return await ai_sdk(message);
  if (cmd === "agui") return agui(message);
  if (cmd === "sse") return sse(message);
  if (cmd === "ws") return ws(message);
  if (cmd === "finish") return await clients.get(message.name);
  throw new Error(`unknown command ${cmd}`);
}

const realWarn = console.warn;
const realError = console.error;
console.warn = () => {};
console.error = () => {}; // HttpAgent reports its verification errors through the promise
for await (const line of iterator) {
  if (!line.trim()) continue;
  const message = JSON.parse(line);
  // Commands run concurrently: "finish" waits while the test publishes.
  handle(message).then(
    (value) => emit({ kind: "reply", id: message.id, ok: true, value }),
    (err) => emit({ kind: "reply", id: message.id, ok: false, error: describe(err) }),
  );
}
console.warn = realWarn;
console.error = realError;
clearTimeout(timer);
