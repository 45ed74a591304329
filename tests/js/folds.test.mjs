// Unit tests of gateway/console/folds.js (node --test; run by tests/test_js_gateway_client.py).
// The runs are tests/agui/runs.py's, exported by the pytest side into RUNS_JSON.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  MAX_MESSAGES,
  applyPatch,
  describeTeamItem,
  foldRun,
  newRunView,
} from "../../gateway/console/folds.js";

const RUNS = process.env.RUNS_JSON ? JSON.parse(process.env.RUNS_JSON) : null;

function fold(events, prelude = false) {
  const view = newRunView();
  for (const e of events) foldRun(view, e, prelude);
  return view;
}

describe("applyPatch (RFC 6902)", () => {
  const doc = { a: 1, list: [1, 2], nested: { "x/y": 1, "t~": 2 } };
  const table = [
    ["add a member", [{ op: "add", path: "/b", value: 2 }], { ...doc, b: 2 }],
    ["add to the end", [{ op: "add", path: "/list/-", value: 3 }], { ...doc, list: [1, 2, 3] }],
    ["insert", [{ op: "add", path: "/list/0", value: 0 }], { ...doc, list: [0, 1, 2] }],
    ["remove", [{ op: "remove", path: "/a" }], { list: [1, 2], nested: doc.nested }],
    ["replace", [{ op: "replace", path: "/list/1", value: 9 }], { ...doc, list: [1, 9] }],
    ["escaped tokens", [{ op: "remove", path: "/nested/x~1y" }, { op: "remove", path: "/nested/t~0" }], { ...doc, nested: {} }],
    ["move", [{ op: "move", from: "/a", path: "/z" }], { list: [1, 2], nested: doc.nested, z: 1 }],
    ["copy", [{ op: "copy", from: "/list", path: "/c" }], { ...doc, c: [1, 2] }],
    ["test then replace", [{ op: "test", path: "/a", value: 1 }, { op: "replace", path: "/a", value: 5 }], { ...doc, a: 5 }],
    ["replace the root", [{ op: "replace", path: "", value: [1] }], [1]],
  ];
  for (const [name, ops, expected] of table) {
    test(name, () => {
      assert.deepEqual(applyPatch(doc, ops), expected);
    });
  }
  test("the input is not changed", () => {
    const before = structuredClone(doc);
    applyPatch(doc, [{ op: "add", path: "/list/-", value: 3 }]);
    assert.deepEqual(doc, before);
  });
  const bad = [
    ["a missing member", [{ op: "remove", path: "/nope" }]],
    ["an index past the end", [{ op: "replace", path: "/list/5", value: 1 }]],
    ["a failed test", [{ op: "test", path: "/a", value: 2 }]],
    ["an unknown op", [{ op: "frobnicate", path: "/a" }]],
    ["a bad pointer", [{ op: "add", path: "a", value: 1 }]],
    ["a path through a scalar", [{ op: "add", path: "/a/b", value: 1 }]],
  ];
  for (const [name, ops] of bad) {
    test(`refuses ${name}`, () => assert.throws(() => applyPatch(doc, ops)));
  }
});

describe("foldRun", () => {
  test("streams text, reasoning and a tool call into the chat", () => {
    const view = fold([
      { type: "RUN_STARTED", threadId: "t", runId: "r", input: { messages: [{ id: "u", role: "user", content: "hi" }] } },
      { type: "REASONING_MESSAGE_START", messageId: "th", role: "reasoning" },
      { type: "REASONING_MESSAGE_CONTENT", messageId: "th", delta: "hmm" },
      { type: "REASONING_MESSAGE_END", messageId: "th" },
      { type: "TEXT_MESSAGE_START", messageId: "m", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "Hel" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "lo" },
      { type: "TOOL_CALL_START", toolCallId: "c", toolCallName: "search", parentMessageId: "m" },
      { type: "TOOL_CALL_ARGS", toolCallId: "c", delta: '{"q":' },
      { type: "TOOL_CALL_ARGS", toolCallId: "c", delta: '"x"}' },
      { type: "TOOL_CALL_END", toolCallId: "c" },
      { type: "TOOL_CALL_RESULT", messageId: "res", toolCallId: "c", content: "found" },
    ]);
    assert.equal(view.status, "running");
    assert.deepEqual(
      view.messages.map((m) => [m.role, m.content, m.streaming]),
      [
        ["user", "hi", false],
        ["reasoning", "hmm", false],
        ["assistant", "Hello", true],
      ],
    );
    assert.deepEqual(view.messages[2].toolCalls, [
      { id: "c", name: "search", args: '{"q":"x"}', done: true, result: "found" },
    ]);
  });

  test("state: snapshot then deltas; a bad delta is a note, not a crash", () => {
    const view = fold([
      { type: "STATE_SNAPSHOT", snapshot: { stage: "a", items: [] } },
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/stage", value: "b" }, { op: "add", path: "/items/-", value: 1 }] },
      { type: "STATE_DELTA", delta: [{ op: "remove", path: "/missing" }] },
    ]);
    assert.deepEqual(view.state, { stage: "b", items: [1] });
    assert.match(view.notes[0], /STATE_DELTA not applied/);
  });

  test("RUN_ERROR ends the run with its message; streaming stops", () => {
    const view = fold([
      { type: "RUN_STARTED", threadId: "t", runId: "r" },
      { type: "TEXT_MESSAGE_START", messageId: "m" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "part" },
      { type: "RUN_ERROR", message: "boom", code: "x" },
    ]);
    assert.equal(view.status, "error");
    assert.deepEqual(view.error, { message: "boom", code: "x" });
    assert.equal(view.messages[0].streaming, false);
  });

  test("a run ended by its lease (producer_lost) is marked lost, not errored", () => {
    const view = fold([
      { type: "RUN_STARTED", threadId: "t", runId: "r" },
      { type: "TEXT_MESSAGE_START", messageId: "m" },
      { type: "RUN_ERROR", message: "the run's producer was lost", code: "producer_lost" },
    ]);
    assert.equal(view.status, "lost");
    assert.deepEqual(view.error, { message: "the run's producer was lost", code: "producer_lost" });
    assert.equal(view.messages[0].streaming, false);
  });

  test("a resume's prelude restates the run without doubling it", () => {
    const before = [
      { type: "RUN_STARTED", threadId: "t", runId: "r" },
      { type: "TEXT_MESSAGE_START", messageId: "m", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "Hel" },
      { type: "TOOL_CALL_START", toolCallId: "c", toolCallName: "f", parentMessageId: "m" },
      { type: "TOOL_CALL_ARGS", toolCallId: "c", delta: "{" },
    ];
    // What the gateway sends a subscription resumed after the 5th event.
    const prelude = [
      { type: "RUN_STARTED", threadId: "t", runId: "r" },
      { type: "STATE_SNAPSHOT", snapshot: {} },
      {
        type: "MESSAGES_SNAPSHOT",
        messages: [
          { id: "m", role: "assistant", content: "Hel", toolCalls: [{ id: "c", type: "function", function: { name: "f", arguments: "{" } }] },
        ],
      },
      { type: "TEXT_MESSAGE_START", messageId: "m", role: "assistant" },
      { type: "TOOL_CALL_START", toolCallId: "c", toolCallName: "f", parentMessageId: "m" },
    ];
    const after = [
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "lo" },
      { type: "TOOL_CALL_ARGS", toolCallId: "c", delta: "}" },
      { type: "TOOL_CALL_END", toolCallId: "c" },
      { type: "TEXT_MESSAGE_END", messageId: "m" },
      { type: "RUN_FINISHED", threadId: "t", runId: "r" },
    ];
    const straight = fold([...before, ...after]);
    const resumed = newRunView();
    for (const e of before) foldRun(resumed, e);
    for (const e of prelude) foldRun(resumed, e, true);
    for (const e of after) foldRun(resumed, e);
    const shape = (v) => ({
      status: v.status,
      messages: v.messages.map((m) => ({ id: m.id, role: m.role, content: m.content, calls: m.toolCalls })),
    });
    assert.deepEqual(shape(resumed), shape(straight));
    assert.equal(resumed.messages[0].content, "Hello");
    assert.equal(resumed.messages[0].toolCalls[0].args, "{}");
    // A prelude for a run already finished keeps it finished.
    foldRun(resumed, prelude[0], true);
    assert.equal(resumed.status, "finished");
  });

  test("the view keeps at most MAX_MESSAGES entries", () => {
    const events = [];
    for (let i = 0; i < MAX_MESSAGES + 20; i++) {
      events.push({ type: "TEXT_MESSAGE_START", messageId: `m${i}` });
    }
    const view = fold(events);
    assert.equal(view.messages.length, MAX_MESSAGES);
    assert.equal(view.messages[0].id, "m20");
  });

  test("every run of tests/agui/runs.py folds to the gateway fold's text", { skip: !RUNS }, () => {
    for (const [name, { events, expected }] of Object.entries(RUNS)) {
      const view = fold(events);
      const text = (messages) =>
        messages.filter((m) => m.role === "assistant" && m.content).map((m) => m.content).join("|");
      assert.equal(text(view.messages), expected.assistant_text, name);
      assert.deepEqual(view.state, expected.state, name);
      assert.equal(view.status, expected.status, name);
    }
  });
});

describe("describeTeamItem", () => {
  const member = { kind: "member", member: { tenant: "a", team: "t", name: "writer-1", generation: 1 } };
  const table = [
    [member, "team_message", { message_id: "m", from: "writer-1", to: "lead", text: "done" }, "member", "writer-1", "writer-1 → lead: done"],
    [member, "team_task_created", { task_id: "T-1", subject: "Plan", blocked_by: ["T-0"] }, "member", "writer-1", "T-1 created: Plan (after T-0)"],
    [member, "team_task_claimed", { task_id: "T-1", member: "writer-1" }, "member", "writer-1", "writer-1 claimed T-1"],
    [member, "team_task_updated", { task_id: "T-1", status: "failed" }, "member", "writer-1", "T-1 failed"],
    [{ kind: "team" }, "team_opened", { team: "t", lead: { name: "lead" } }, "team", "", "team opened by lead"],
    [{ kind: "operator", principal: { subject: "ops" }, request: "r" }, "member_ended", { result: {} }, "operator", "ops", '{"result":{}}'],
  ];
  for (const [source, type, data, kind, name, text] of table) {
    test(type, () => {
      const d = describeTeamItem({ kind: "event", source, event: { type, data } });
      assert.deepEqual(d, { source: { kind, name }, type, text });
    });
  }
  test("long text is clipped", () => {
    const d = describeTeamItem({ source: member, event: { type: "team_message", data: { from: "a", to: "b", text: "x".repeat(1000) } } });
    assert.equal(d.text.length, 240);
  });
});
