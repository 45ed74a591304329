// Replays AI SDK UI message streams (SSE bytes as the gateway writes them) through the
// real `ai` package, without a network: a fetch stand-in answers DefaultChatTransport,
// whose reconnectToStream parses the SSE and validates every chunk against
// uiMessageChunkSchema, and readUIMessageStream (or an AbstractChat resuming) folds the
// chunks into UIMessages.
// stdin: {"streams": {"<name>": {"sse": ["<response body>", ...]}},
//         "chats": {"<name>": {"id": "...", "messages": [...],
//                              "responses": [{"status": 204} | {"status": 200, "sse": "..."}]}}}
// stdout: {"streams": {"<name>": {"message": UIMessage | null, "errors": [...], "requests": [...]}},
//          "chats": {"<name>": {"messages": [...], "status": "...", "errors": [...],
//                               "data": [...], "finishes": [...], "requests": [...]}}}
import { AbstractChat, DefaultChatTransport, readUIMessageStream } from "ai";

function transport(responses, requests) {
  let next = 0;
  return new DefaultChatTransport({
    api: "/api/chat",
    fetch: async (url, init) => {
      requests.push({ url: String(url), method: init?.method ?? "GET" });
      const answer = responses[Math.min(next, responses.length - 1)];
      next += 1;
      if (answer.status === 204) return new Response(null, { status: 204 });
      return new Response(answer.sse, {
        status: answer.status,
        headers: { "content-type": "text/event-stream", "x-vercel-ai-ui-message-stream": "v1" },
      });
    },
  });
}

function describe(err) {
  return { name: String(err?.name ?? "Error"), message: String(err?.message ?? err) };
}

// Several bodies are several responses (a client that reconnected after its cursor)
// whose chunks one stateful reader folds in order.
async function readStream({ sse }) {
  const requests = [];
  const errors = [];
  const bodies = Array.isArray(sse) ? sse : [sse];
  const chat = transport(
    bodies.map((body) => ({ status: 200, sse: body })),
    requests,
  );
  const parts = [];
  for (let i = 0; i < bodies.length; i++) {
    parts.push(await chat.reconnectToStream({ chatId: "chat-1" }));
  }
  const stream = new ReadableStream({
    async start(controller) {
      try {
        for (const part of parts) {
          for await (const chunk of part) controller.enqueue(chunk);
        }
        controller.close();
      } catch (err) {
        controller.error(err);
      }
    },
  });
  let message = null;
  for await (const snapshot of readUIMessageStream({
    stream,
    onError: (err) => errors.push(describe(err)),
  })) {
    message = snapshot;
  }
  return { message, errors, requests };
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

class Chat extends AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new MemoryState(messages) });
  }
  get messages() {
    return this.state.messages;
  }
}

async function runChat({ id, messages, responses }) {
  const requests = [];
  const errors = [];
  const data = [];
  const finishes = [];
  let counter = 0;
  const chat = new Chat({
    id,
    messages,
    generateId: () => `generated-${++counter}`,
    transport: transport(responses, requests),
    onError: (err) => errors.push(describe(err)),
    onData: (part) => data.push(part),
    onFinish: ({ message, isError, isAbort, isDisconnect, finishReason }) =>
      finishes.push({ id: message.id, isError, isAbort, isDisconnect, finishReason }),
  });
  const after = [];
  for (let i = 0; i < responses.length; i++) {
    await chat.resumeStream();
    after.push({ status: chat.status, messages: structuredClone(chat.messages) });
  }
  return { after, errors, data, finishes, requests };
}

const input = [];
for await (const part of process.stdin) input.push(part);
const { streams = {}, chats = {} } = JSON.parse(Buffer.concat(input).toString("utf8"));
const out = { streams: {}, chats: {} };
const realWarn = console.warn;
console.warn = () => {}; // the SDK warns about rawInput on output-error tool parts
try {
  for (const [name, stream] of Object.entries(streams)) out.streams[name] = await readStream(stream);
  for (const [name, chat] of Object.entries(chats)) out.chats[name] = await runChat(chat);
} finally {
  console.warn = realWarn;
}
process.stdout.write(JSON.stringify(out));
