// The real AI SDK client (ai@7.0.113) against a real gateway node: DefaultChatTransport's
// reconnectToStream (what useChat({resume: true}) calls) and readUIMessageStream, and an
// AbstractChat resuming with resumeStream().
//
// Usage: node ai_sdk_http.mjs, then JSON lines on stdin (tests/support/jsprocess.py):
//   first line, the config: {"base": "<node URL>", "timeout_ms"?}
//   then commands, each answered by {"kind": "reply", "id", "ok", "value"|"error"}:
//     {"cmd": "fold", "chunks": [...]}: the UIMessage readUIMessageStream folds from these
//         chunks (no network): the reference
//     {"cmd": "open", "name", "chatId", "token", "agent"?, "path"?}: reconnectToStream on
//         {base}/v1/ui/ai-sdk/{agent} (or on {base}{path} instead, through
//         prepareReconnectToStreamRequest); replies once the response is there with
//         {status, header, contentType, stream} and reads the stream in the background
//     {"cmd": "finish", "name"}: waits for that stream's end: {message, errors}
//     {"cmd": "chat", "name", "chatId", "messages", "token", "agent"?}: an AbstractChat holding
//         `messages` calls resumeStream(); replies once the response is there ({status})
//     {"cmd": "chatDone", "name"}: waits for resumeStream(): {messages, status, errors,
//         finishes, requests}
import readline from "node:readline";
import { AbstractChat, DefaultChatTransport, readUIMessageStream } from "ai";

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
}, config.timeout_ms ?? 100000);

// A fetch that records every response (its status and the stream header, read on the raw
// response) and tells whoever waits that the response has come.
function recordingFetch(requests, onResponse) {
  return async (url, init) => {
    const response = await fetch(url, init);
    const record = {
      url: String(url),
      method: init?.method ?? "GET",
      status: response.status,
      header: response.headers.get("x-vercel-ai-ui-message-stream"),
      contentType: response.headers.get("content-type"),
    };
    requests.push(record);
    onResponse(record);
    return response;
  };
}

function transport({ token, agent, path }, requests, onResponse) {
  const headers = { Authorization: `Bearer ${token}` };
  const options = {
    api: `${config.base}/v1/ui/ai-sdk/${agent ?? "any-agent"}`,
    headers,
    fetch: recordingFetch(requests, onResponse),
  };
  if (path) {
    options.prepareReconnectToStreamRequest = () => ({ api: `${config.base}${path}`, headers });
  }
  return new DefaultChatTransport(options);
}

async function fold(chunks, errors) {
  const stream = new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
  return read(stream, errors);
}

async function read(stream, errors) {
  let message = null;
  try {
    for await (const snapshot of readUIMessageStream({
      stream,
      onError: (err) => errors.push(describe(err)),
    })) {
      message = snapshot;
    }
  } catch (err) {
    errors.push(describe(err)); // a chunk the transport refused (uiMessageChunkSchema)
  }
  return message;
}

class MemoryState {
  constructor(messages) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage(message) {
    this.messages = this.messages.concat([message]);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

// What a UI framework binding (useChat) is, without the framework: state in memory.
class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new MemoryState(messages) });
  }
}

const streams = new Map();
const chats = new Map();

async function handle(message) {
  const { cmd } = message;
  if (cmd === "fold") {
    const errors = [];
    return { message: await fold(message.chunks, errors), errors };
  }
  if (cmd === "open") {
    const requests = [];
    const chat = transport(message, requests, () => {});
    const stream = await chat.reconnectToStream({ chatId: message.chatId });
    const [response] = requests;
    const errors = [];
    streams.set(message.name, {
      errors,
      done: stream === null ? Promise.resolve(null) : read(stream, errors),
    });
    return { ...response, stream: stream !== null };
  }
  if (cmd === "finish") {
    const entry = streams.get(message.name);
    return { message: await entry.done, errors: entry.errors };
  }
  if (cmd === "chat") {
    const requests = [];
    const errors = [];
    const finishes = [];
    let responded;
    const response = new Promise((resolve) => (responded = resolve));
    const chat = new Chat({
      id: message.chatId,
      messages: message.messages,
      transport: transport(message, requests, responded),
      onError: (err) => errors.push(describe(err)),
      onFinish: ({ message: m, isError, isAbort, isDisconnect, finishReason }) =>
        finishes.push({ id: m.id, isError, isAbort, isDisconnect, finishReason }),
    });
    const done = chat.resumeStream();
    chats.set(message.name, { chat, done, errors, finishes, requests });
    return await response;
  }
  if (cmd === "chatDone") {
    const entry = chats.get(message.name);
    await entry.done;
    const { chat, errors, finishes, requests } = entry;
    return { messages: chat.messages, status: chat.status, errors, finishes, requests };
  }
  throw new Error(`unknown command ${cmd}`);
}

const realWarn = console.warn;
console.warn = () => {}; // the SDK warns about rawInput on output-error tool parts
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
clearTimeout(timer);
