// folds.js: what the console shows of a feed, folded from its items (pure, no DOM).
//
// foldRun(view, event, prelude) applies one AG-UI event to a run view: the chat
// (user, assistant and reasoning messages, text as it streams, tool calls with their
// arguments and results), the state (STATE_SNAPSHOT, then STATE_DELTA as RFC 6902
// patches), the run's status, the open steps, activities and notes. It is idempotent for
// the prelude a resumed subscription starts with (RUN_STARTED, STATE_SNAPSHOT,
// MESSAGES_SNAPSHOT, then the start events of what is open): a snapshot replaces what it
// covers, a start event for something already there keeps what it has.
//
// describeTeamItem(item) summarises a TeamItem: who (source), what (event type) and a
// line of text.

/** Entries a run view keeps; older ones are dropped (a long run must not grow the page). */
export const MAX_MESSAGES = 200;
export const MAX_NOTES = 50;

export function newRunView() {
  return {
    status: "unknown", // "running", "finished", "error"
    error: null, // {message, code}
    result: null,
    state: {},
    messages: [], // {id, role, content, streaming, toolCalls: [call]}
    calls: new Map(), // toolCallId -> {id, name, args, done, result}
    steps: [],
    activities: new Map(), // messageId -> {activityType, content}
    notes: [],
    lastText: null, // the message a TEXT_MESSAGE_CHUNK without id continues
    lastReasoning: null,
    lastCall: null,
  };
}

// -- JSON Patch (RFC 6902), on a copy ---------------------------------------------------

function unescapeToken(token) {
  return token.replace(/~1/g, "/").replace(/~0/g, "~");
}

function parsePointer(pointer) {
  if (pointer === "") return [];
  if (typeof pointer !== "string" || !pointer.startsWith("/")) {
    throw new Error(`bad JSON pointer ${JSON.stringify(pointer)}`);
  }
  return pointer.slice(1).split("/").map(unescapeToken);
}

function clone(value) {
  return value === undefined ? undefined : structuredClone(value);
}

function arrayIndex(array, token, forAdd) {
  if (forAdd && token === "-") return array.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new Error(`bad array index ${token}`);
  const index = Number(token);
  if (index > array.length || (!forAdd && index === array.length)) {
    throw new Error(`array index ${token} out of range`);
  }
  return index;
}

function parentOf(doc, tokens) {
  let node = doc;
  for (const token of tokens.slice(0, -1)) {
    if (Array.isArray(node)) node = node[arrayIndex(node, token, false)];
    else if (node !== null && typeof node === "object" && Object.hasOwn(node, token)) node = node[token];
    else throw new Error(`path not found: /${tokens.join("/")}`);
  }
  if (node === null || typeof node !== "object") throw new Error(`not a container: /${tokens.join("/")}`);
  return node;
}

function getAt(doc, tokens) {
  if (tokens.length === 0) return doc;
  const parent = parentOf(doc, tokens);
  const last = tokens.at(-1);
  if (Array.isArray(parent)) return parent[arrayIndex(parent, last, false)];
  if (!Object.hasOwn(parent, last)) throw new Error(`path not found: /${tokens.join("/")}`);
  return parent[last];
}

function removeAt(doc, tokens) {
  const parent = parentOf(doc, tokens);
  const last = tokens.at(-1);
  if (Array.isArray(parent)) return parent.splice(arrayIndex(parent, last, false), 1)[0];
  if (!Object.hasOwn(parent, last)) throw new Error(`path not found: /${tokens.join("/")}`);
  const value = parent[last];
  delete parent[last];
  return value;
}

function addAt(doc, tokens, value) {
  if (tokens.length === 0) return value;
  const parent = parentOf(doc, tokens);
  const last = tokens.at(-1);
  if (Array.isArray(parent)) parent.splice(arrayIndex(parent, last, true), 0, value);
  else parent[last] = value;
  return doc;
}

function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && deepEqual(a[k], b[k]));
}

/** `doc` with the RFC 6902 `ops` applied (doc itself is not changed); throws on a bad op. */
export function applyPatch(doc, ops) {
  if (!Array.isArray(ops)) throw new Error("a patch is an array of operations");
  let out = clone(doc);
  for (const op of ops) {
    const path = parsePointer(op.path);
    switch (op.op) {
      case "add":
        out = addAt(out, path, clone(op.value));
        break;
      case "remove":
        if (path.length === 0) throw new Error("cannot remove the whole document");
        removeAt(out, path);
        break;
      case "replace":
        if (path.length === 0) out = clone(op.value);
        else {
          removeAt(out, path);
          out = addAt(out, path, clone(op.value));
        }
        break;
      case "move": {
        const from = parsePointer(op.from);
        const value = getAt(out, from);
        if (from.length > 0) removeAt(out, from);
        out = addAt(out, path, value);
        break;
      }
      case "copy":
        out = addAt(out, path, clone(getAt(out, parsePointer(op.from))));
        break;
      case "test":
        if (!deepEqual(getAt(out, path), op.value)) throw new Error(`test failed at ${op.path}`);
        break;
      default:
        throw new Error(`unknown patch op ${JSON.stringify(op.op)}`);
    }
  }
  return out;
}

// -- runs ---------------------------------------------------------------------------------

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && typeof part.text === "string" ? part.text : part?.type ? `[${part.type}]` : ""))
      .join("");
  }
  if (content === undefined || content === null) return "";
  return JSON.stringify(content);
}

function note(view, text) {
  view.notes.push(text);
  if (view.notes.length > MAX_NOTES) view.notes.splice(0, view.notes.length - MAX_NOTES);
}

function message(view, id, role) {
  let entry = view.messages.find((m) => m.id === id);
  if (!entry) {
    entry = { id, role, content: "", streaming: false, toolCalls: [] };
    view.messages.push(entry);
    if (view.messages.length > MAX_MESSAGES) {
      for (const dropped of view.messages.splice(0, view.messages.length - MAX_MESSAGES)) {
        for (const call of dropped.toolCalls) view.calls.delete(call.id);
      }
    }
  }
  return entry;
}

function toolCall(view, id, name, parentId) {
  let call = view.calls.get(id);
  if (call) return call;
  call = { id, name: name ?? "tool", args: "", done: false, result: null };
  view.calls.set(id, call);
  const parent = parentId ? view.messages.find((m) => m.id === parentId) : null;
  const holder = parent ?? message(view, `call:${id}`, "assistant");
  holder.toolCalls.push(call);
  return call;
}

function stopStreaming(view) {
  for (const m of view.messages) m.streaming = false;
  for (const call of view.calls.values()) call.done = true;
}

function snapshotMessages(view, messages) {
  const old = new Map(view.messages.map((m) => [m.id, m]));
  view.messages = [];
  view.calls = new Map();
  const results = [];
  for (const m of messages) {
    if (!m || typeof m.id !== "string") continue;
    if (m.role === "tool") {
      results.push(m);
      continue;
    }
    const entry = message(view, m.id, m.role ?? "assistant");
    entry.content = textOf(m.content);
    entry.streaming = old.get(m.id)?.streaming ?? false;
    for (const c of m.toolCalls ?? []) {
      const call = toolCall(view, c.id, c.function?.name, m.id);
      call.args = typeof c.function?.arguments === "string" ? c.function.arguments : "";
      call.done = true;
    }
  }
  for (const r of results) {
    const call = view.calls.get(r.toolCallId);
    if (call) call.result = textOf(r.content);
    else message(view, r.id, "tool").content = textOf(r.content);
  }
}

/**
 * Apply one AG-UI `event` to `view` (changed in place and returned). `prelude`: the event
 * restates the run so far (a resumed subscription), so RUN_STARTED keeps a known status.
 */
export function foldRun(view, event, prelude = false) {
  const e = event ?? {};
  switch (e.type) {
    case "RUN_STARTED":
      if (!prelude || view.status === "unknown") view.status = "running";
      if (!prelude) {
        for (const m of e.input?.messages ?? []) {
          if (m && typeof m.id === "string") message(view, m.id, m.role ?? "user").content = textOf(m.content);
        }
      }
      break;
    case "RUN_FINISHED":
      view.status = "finished";
      view.result = e.result ?? null;
      view.steps = [];
      stopStreaming(view);
      break;
    case "RUN_ERROR":
      // The gateway's own end for a run whose producer stopped renewing its lease.
      view.status = e.code === "producer_lost" ? "lost" : "error";
      view.error = { message: e.message ?? "", code: e.code ?? null };
      view.steps = [];
      stopStreaming(view);
      break;
    case "STEP_STARTED":
      if (!view.steps.includes(e.stepName)) view.steps.push(e.stepName);
      break;
    case "STEP_FINISHED":
      view.steps = view.steps.filter((s) => s !== e.stepName);
      break;
    case "TEXT_MESSAGE_START": {
      const m = message(view, e.messageId, e.role ?? "assistant");
      m.streaming = true;
      view.lastText = e.messageId;
      break;
    }
    case "TEXT_MESSAGE_CONTENT":
      message(view, e.messageId, "assistant").content += e.delta ?? "";
      break;
    case "TEXT_MESSAGE_END":
      message(view, e.messageId, "assistant").streaming = false;
      break;
    case "TEXT_MESSAGE_CHUNK": {
      const id = e.messageId ?? view.lastText ?? "text";
      const m = message(view, id, e.role ?? "assistant");
      m.content += e.delta ?? "";
      m.streaming = true;
      view.lastText = id;
      break;
    }
    case "REASONING_MESSAGE_START":
      message(view, e.messageId, "reasoning").streaming = true;
      view.lastReasoning = e.messageId;
      break;
    case "REASONING_MESSAGE_CONTENT":
      message(view, e.messageId, "reasoning").content += e.delta ?? "";
      break;
    case "REASONING_MESSAGE_END":
      message(view, e.messageId, "reasoning").streaming = false;
      break;
    case "REASONING_MESSAGE_CHUNK": {
      const id = e.messageId ?? view.lastReasoning ?? "reasoning";
      const m = message(view, id, "reasoning");
      m.content += e.delta ?? "";
      view.lastReasoning = id;
      break;
    }
    case "REASONING_START":
    case "REASONING_END":
    case "REASONING_ENCRYPTED_VALUE":
      break; // spans and opaque values: nothing to show beyond the reasoning messages
    case "TOOL_CALL_START":
      toolCall(view, e.toolCallId, e.toolCallName, e.parentMessageId);
      view.lastCall = e.toolCallId;
      break;
    case "TOOL_CALL_ARGS":
      toolCall(view, e.toolCallId).args += e.delta ?? "";
      break;
    case "TOOL_CALL_END":
      toolCall(view, e.toolCallId).done = true;
      break;
    case "TOOL_CALL_CHUNK": {
      const id = e.toolCallId ?? view.lastCall ?? "call";
      toolCall(view, id, e.toolCallName, e.parentMessageId).args += e.delta ?? "";
      view.lastCall = id;
      break;
    }
    case "TOOL_CALL_RESULT": {
      const call = view.calls.get(e.toolCallId);
      if (call) call.result = textOf(e.content);
      else message(view, e.messageId ?? `result:${e.toolCallId}`, "tool").content = textOf(e.content);
      break;
    }
    case "STATE_SNAPSHOT":
      view.state = clone(e.snapshot);
      break;
    case "STATE_DELTA":
      try {
        view.state = applyPatch(view.state, e.delta);
      } catch (err) {
        note(view, `STATE_DELTA not applied: ${err.message}`);
      }
      break;
    case "MESSAGES_SNAPSHOT":
      snapshotMessages(view, Array.isArray(e.messages) ? e.messages : []);
      break;
    case "ACTIVITY_SNAPSHOT":
      view.activities.set(e.messageId, { activityType: e.activityType, content: clone(e.content) });
      break;
    case "ACTIVITY_DELTA": {
      const activity = view.activities.get(e.messageId);
      try {
        if (!activity) throw new Error("no snapshot before it");
        activity.content = applyPatch(activity.content, e.patch);
      } catch (err) {
        note(view, `ACTIVITY_DELTA ${e.messageId} not applied: ${err.message}`);
      }
      break;
    }
    case "SUBAGENT_STARTED":
      note(view, `subagent ${e.name ?? e.subagentRunId} started`);
      break;
    case "SUBAGENT_FINISHED":
      note(view, `subagent ${e.subagentRunId} finished`);
      break;
    case "SUBAGENT_ERROR":
      note(view, `subagent ${e.subagentRunId} failed: ${e.message ?? ""}`);
      break;
    case "CUSTOM":
      note(view, `custom event ${e.name}`);
      break;
    case "RAW":
      note(view, `raw event${e.source ? ` from ${e.source}` : ""}`);
      break;
    default:
      note(view, `event ${String(e.type)}`);
  }
  return view;
}

// -- team items -----------------------------------------------------------------------------

/** Who published a team item: {kind, name}. */
export function describeSource(source) {
  if (source?.kind === "member") return { kind: "member", name: source.member?.name ?? "?" };
  if (source?.kind === "operator") return { kind: "operator", name: source.principal?.subject ?? "?" };
  return { kind: source?.kind ?? "?", name: "" }; // the team log's own events
}

function clip(text, limit = 240) {
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

/** A TeamItem as {source: {kind, name}, type, text}. */
export function describeTeamItem(item) {
  const event = item?.event ?? {};
  const d = event.data ?? {};
  let text;
  switch (event.type) {
    case "team_message":
      text = `${d.from} → ${d.to}: ${d.text ?? "[attachment]"}`;
      break;
    case "team_task_created":
      text = `${d.task_id} created: ${d.subject}${d.blocked_by?.length ? ` (after ${d.blocked_by.join(", ")})` : ""}`;
      break;
    case "team_task_claimed":
      text = `${d.member} claimed ${d.task_id}`;
      break;
    case "team_task_updated":
      text = `${d.task_id} ${d.status}`;
      break;
    case "team_opened":
      text = d.kind === "host" ? `host team of ${d.tenant}` : `team opened by ${d.lead?.name ?? "the lead"}`;
      break;
    default:
      text = JSON.stringify(d);
  }
  return { source: describeSource(item?.source), type: String(event.type ?? "?"), text: clip(String(text)) };
}
