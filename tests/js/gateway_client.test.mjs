// Unit tests of gateway/console/gateway-client.js with a fake WebSocket and mocked timers
// (node --test; tests/test_js_gateway_client.py runs them). The real-socket behaviour is
// tested against real nodes by that pytest file.
import assert from "node:assert/strict";
import { beforeEach, afterEach, describe, mock, test } from "node:test";
import {
  GatewayClient,
  backoffDelay,
  compareCursors,
  feedKind,
  parseCursor,
  tokenExpiry,
  websocketUrl,
} from "../../gateway/console/gateway-client.js";

const TEAM = "team/0190f5a2-7c1e-7b3d-8a4f-000000000001";
const TEAM2 = "team/0190f5a2-7c1e-7b3d-8a4f-000000000002";
const RUN = "run/thread-1/run-1";

/** A WebSocket double: records what is sent; the test plays the server. */
class FakeSocket {
  static instances = [];
  constructor(url, protocols, options) {
    this.url = url;
    this.protocols = protocols;
    this.options = options;
    this.readyState = 0;
    this.protocol = "";
    this.sent = [];
    this.closedWith = null;
    FakeSocket.instances.push(this);
  }
  send(data) {
    assert.equal(this.readyState, 1, "send on a socket that is not open");
    this.sent.push(JSON.parse(data));
  }
  close(code, reason) {
    this.closedWith = { code, reason };
    this.readyState = 3;
  }
  // -- the server's side
  open(protocol = "gateway.v1") {
    this.readyState = 1;
    this.protocol = protocol;
    this.onopen?.({});
  }
  frame(obj) {
    this.onmessage?.({ data: typeof obj === "string" ? obj : JSON.stringify(obj) });
  }
  drop(code = 1006, reason = "") {
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }
  subscribes() {
    return this.sent.filter((m) => m.type === "subscribe");
  }
}

function last() {
  return FakeSocket.instances.at(-1);
}

function jwt(claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}.c2ln`;
}

function makeClient(options = {}) {
  const client = new GatewayClient({
    url: "http://gw.test:8080",
    token: "tok",
    WebSocket: FakeSocket,
    backoff: { minMs: 100, maxMs: 1000 },
    random: () => 0.5,
    ...options,
  });
  const seen = { events: [], states: [], errors: [], restarts: [], duplicates: [] };
  client.addEventListener("state", (e) => seen.states.push(e.detail));
  client.addEventListener("error", (e) => seen.errors.push(e.detail));
  client.addEventListener("restart", (e) => seen.restarts.push(e.detail));
  client.addEventListener("duplicate", (e) => seen.duplicates.push(e.detail));
  return { client, seen };
}

function follow(client, seen, feed, opts = {}) {
  return client.subscribe(feed, { onEvent: (ev) => seen.events.push(ev), ...opts });
}

/** Let getToken's promise (awaited by the client) settle. */
async function settle() {
  for (let i = 0; i < 5; i++) await Promise.resolve();
}

async function connected(client, seen, feeds) {
  for (const f of feeds) follow(client, seen, f.feed ?? f, f.opts);
  await settle();
  const socket = last();
  socket.open();
  return socket;
}

beforeEach(() => {
  FakeSocket.instances = [];
  mock.timers.enable({ apis: ["setTimeout"] });
});
afterEach(() => {
  mock.timers.reset();
});

describe("pure helpers", () => {
  test("parseCursor accepts E:O within 0..2^53-1 and nothing else", () => {
    const table = [
      ["1:2", { epoch: 1, offset: 2 }],
      ["0:0", { epoch: 0, offset: 0 }],
      ["007:01", { epoch: 7, offset: 1 }],
      ["9007199254740991:9007199254740991", { epoch: 2 ** 53 - 1, offset: 2 ** 53 - 1 }],
      ["9007199254740992:0", null],
      ["1:", null],
      ["-1:2", null],
      ["1:2:3", null],
      [" 1:2", null],
      [12, null],
      [null, null],
    ];
    for (const [input, expected] of table) assert.deepEqual(parseCursor(input), expected, String(input));
  });

  test("compareCursors orders by epoch, then offset", () => {
    const c = (s) => parseCursor(s);
    assert.ok(compareCursors(c("1:9"), c("2:0")) < 0);
    assert.ok(compareCursors(c("2:1"), c("2:0")) > 0);
    assert.equal(compareCursors(c("2:01"), c("2:1")), 0);
  });

  test("websocketUrl maps http(s) bases to /v1/ws and keeps ws(s) URLs", () => {
    const table = [
      ["http://h:8080", "ws://h:8080/v1/ws"],
      ["https://h/", "wss://h/v1/ws"],
      ["https://h/gw/?x=1#y", "wss://h/gw/v1/ws"],
      ["ws://h:1/v1/ws", "ws://h:1/v1/ws"],
    ];
    for (const [input, expected] of table) assert.equal(websocketUrl(input), expected);
    assert.equal(websocketUrl("/", "https://page.example/console/"), "wss://page.example/v1/ws");
    assert.throws(() => websocketUrl("ftp://h"), TypeError);
  });

  test("tokenExpiry reads exp in ms, null for anything else", () => {
    assert.equal(tokenExpiry(jwt({ exp: 1700000000 })), 1700000000 * 1000);
    assert.equal(tokenExpiry(jwt({ sub: "x" })), null);
    assert.equal(tokenExpiry("not-a-jwt"), null);
    assert.equal(tokenExpiry("a.%%%.c"), null);
  });

  test("backoffDelay is full jitter below min(max, min*2^attempt)", () => {
    const b = { minMs: 100, maxMs: 1000 };
    assert.equal(backoffDelay(0, b, () => 0.999), 99);
    assert.equal(backoffDelay(3, b, () => 0.5), 400);
    assert.equal(backoffDelay(10, b, () => 0.5), 500);
    assert.equal(backoffDelay(2, b, () => 0), 0);
    assert.equal(backoffDelay(1000, b, () => 0.5), 500); // no overflow to Infinity/NaN
  });

  test("feedKind", () => {
    assert.equal(feedKind(TEAM), "team");
    assert.equal(feedKind(RUN), "run");
    assert.equal(feedKind("other/x"), null);
  });
});

describe("subscribing and delivering", () => {
  test("one socket, bearer subprotocol, subscribes every feed with its cursor", async () => {
    const { client, seen } = makeClient({ cursors: { [TEAM2]: "5:3" } });
    const socket = await connected(client, seen, [TEAM, TEAM2]);
    assert.equal(FakeSocket.instances.length, 1);
    assert.equal(socket.url, "ws://gw.test:8080/v1/ws");
    assert.deepEqual(socket.protocols, ["gateway.v1", "bearer.tok"]);
    assert.deepEqual(socket.subscribes(), [
      { type: "subscribe", feed: TEAM },
      { type: "subscribe", feed: TEAM2, after: "5:3" },
    ]);
    assert.deepEqual(
      seen.states.map((s) => s.state),
      ["connecting", "open"],
    );
  });

  test("header auth passes Authorization to the constructor instead", async () => {
    const { client, seen } = makeClient({ auth: "header" });
    const socket = await connected(client, seen, [TEAM]);
    assert.deepEqual(socket.protocols, ["gateway.v1"]);
    assert.equal(socket.options.headers.Authorization, "Bearer tok");
  });

  test("events advance the cursor; a frame at or before it is counted, not delivered", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "5:2" });
    for (const c of ["5:1", "5:2", "5:2", "5:1", "4:9", "5:3"]) {
      socket.frame({ type: "event", feed: TEAM, cursor: c, data: { c } });
    }
    assert.deepEqual(
      seen.events.map((e) => [e.cursor, e.prelude]),
      [
        ["5:1", false],
        ["5:2", false],
        ["5:3", false],
      ],
    );
    assert.equal(client.stats.duplicates, 3);
    assert.deepEqual(
      seen.duplicates.map((d) => [d.cursor, d.last]),
      [
        ["5:2", "5:2"],
        ["5:1", "5:2"],
        ["4:9", "5:2"],
      ],
    );
    assert.deepEqual(client.cursors(), { [TEAM]: "5:3" });
  });

  test("frames before `subscribed` belong to an older subscription: ignored as stale", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    socket.frame({ type: "event", feed: TEAM, cursor: "5:1", data: {} });
    socket.frame({ type: "event", feed: "team/unknown", cursor: "5:1", data: {} });
    assert.equal(seen.events.length, 0);
    assert.equal(client.stats.stale, 2);
    assert.equal(client.cursor(TEAM), null);
  });

  test("unknown message types and members are ignored; bad frames are reported", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "5:0", extra: 1 });
    socket.frame({ type: "future_thing", feed: TEAM });
    socket.frame("{not json");
    socket.frame({ type: "event", feed: TEAM, cursor: "nope", data: {} });
    socket.frame({ type: "event", feed: TEAM, cursor: "5:1", data: {}, later: true });
    assert.deepEqual(
      seen.events.map((e) => e.cursor),
      ["5:1"],
    );
    assert.deepEqual(
      seen.errors.map((e) => e.code),
      ["invalid_frame", "invalid_frame"],
    );
  });

  test("a throwing handler is reported and does not stop other feeds", async () => {
    const { client, seen } = makeClient();
    client.subscribe(TEAM, {
      onEvent: () => {
        throw new Error("app bug");
      },
    });
    const socket = await connected(client, seen, [TEAM2]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "1:0" });
    socket.frame({ type: "subscribed", feed: TEAM2, cursor: "1:0" });
    socket.frame({ type: "event", feed: TEAM, cursor: "1:1", data: {} });
    socket.frame({ type: "event", feed: TEAM2, cursor: "1:1", data: {} });
    assert.deepEqual(seen.errors.map((e) => [e.feed, e.code]), [[TEAM, "handler_failed"]]);
    assert.deepEqual(seen.events.map((e) => e.feed), [TEAM2]);
    assert.equal(client.cursor(TEAM), "1:1"); // delivered (the app saw it), so not again
  });

  test("unsubscribe sends unsubscribe, keeps the cursor, ignores late frames", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "1:0" });
    socket.frame({ type: "event", feed: TEAM, cursor: "1:1", data: {} });
    client.unsubscribe(TEAM);
    socket.frame({ type: "event", feed: TEAM, cursor: "1:2", data: {} });
    assert.deepEqual(socket.sent.at(-1), { type: "unsubscribe", feed: TEAM });
    assert.equal(seen.events.length, 1);
    assert.deepEqual(client.cursors(), { [TEAM]: "1:1" });
    assert.deepEqual(client.feeds(), []);
  });
});

describe("run preludes", () => {
  test("resumed after E:O: frames at E:O are the prelude and keep the cursor", async () => {
    const { client, seen } = makeClient({ cursors: { [RUN]: "7:5" } });
    const socket = await connected(client, seen, [RUN]);
    socket.frame({ type: "subscribed", feed: RUN, cursor: "7:9" });
    for (const type of ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "TEXT_MESSAGE_START"]) {
      socket.frame({ type: "event", feed: RUN, cursor: "7:5", data: { type } });
    }
    socket.frame({ type: "event", feed: RUN, cursor: "7:6", data: { type: "TEXT_MESSAGE_CONTENT" } });
    socket.frame({ type: "event", feed: RUN, cursor: "7:5", data: { type: "LATE" } });
    assert.deepEqual(
      seen.events.map((e) => [e.cursor, e.data.type, e.prelude]),
      [
        ["7:5", "RUN_STARTED", true],
        ["7:5", "STATE_SNAPSHOT", true],
        ["7:5", "MESSAGES_SNAPSHOT", true],
        ["7:5", "TEXT_MESSAGE_START", true],
        ["7:6", "TEXT_MESSAGE_CONTENT", false],
      ],
    );
    assert.equal(client.stats.duplicates, 1); // the one after the prelude ended
    assert.equal(client.cursor(RUN), "7:6");
  });

  test("joined without a cursor at the start: no prelude", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [RUN]);
    socket.frame({ type: "subscribed", feed: RUN, cursor: "7:2" });
    socket.frame({ type: "event", feed: RUN, cursor: "7:1", data: { type: "RUN_STARTED" } });
    socket.frame({ type: "event", feed: RUN, cursor: "7:2", data: { type: "STEP_STARTED" } });
    assert.deepEqual(
      seen.events.map((e) => [e.cursor, e.prelude]),
      [
        ["7:1", false],
        ["7:2", false],
      ],
    );
  });

  test("joined without a cursor past a trimmed start: the prelude's cursor is the join point", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [RUN]);
    socket.frame({ type: "subscribed", feed: RUN, cursor: "7:12" });
    socket.frame({ type: "event", feed: RUN, cursor: "7:10", data: { type: "RUN_STARTED" } });
    socket.frame({ type: "event", feed: RUN, cursor: "7:10", data: { type: "STATE_SNAPSHOT" } });
    socket.frame({ type: "event", feed: RUN, cursor: "7:11", data: { type: "STEP_STARTED" } });
    assert.deepEqual(
      seen.events.map((e) => [e.cursor, e.prelude]),
      [
        ["7:10", true],
        ["7:10", true],
        ["7:11", false],
      ],
    );
    assert.equal(client.stats.duplicates, 0);
  });

  test("team feeds have no prelude: a frame at the resume cursor is a duplicate", async () => {
    const { client, seen } = makeClient({ cursors: { [TEAM]: "7:5" } });
    const socket = await connected(client, seen, [TEAM]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "7:9" });
    socket.frame({ type: "event", feed: TEAM, cursor: "7:5", data: {} });
    assert.equal(seen.events.length, 0);
    assert.equal(client.stats.duplicates, 1);
  });
});

describe("reconnecting", () => {
  test("a lost socket reconnects after full-jitter backoff and resumes every feed", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM, TEAM2]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "1:0" });
    socket.frame({ type: "subscribed", feed: TEAM2, cursor: "1:0" });
    socket.frame({ type: "event", feed: TEAM, cursor: "1:1", data: {} });
    socket.drop(1006);
    assert.deepEqual(seen.states.at(-1), {
      state: "waiting",
      previous: "open",
      code: 1006,
      reason: "",
      delayMs: 100, // 0.5 * min(1000, 100 * 2^1): a loss starts one step up
      attempt: 1,
    });
    follow(client, seen, RUN); // does not jump the backoff
    mock.timers.tick(99);
    await settle();
    assert.equal(FakeSocket.instances.length, 1);
    mock.timers.tick(1);
    await settle();
    assert.equal(FakeSocket.instances.length, 2);
    // The second attempt fails too: the ceiling doubles.
    last().drop(1006);
    assert.equal(seen.states.at(-1).delayMs, 200);
    mock.timers.tick(200);
    await settle();
    const again = last();
    again.open();
    assert.deepEqual(again.subscribes(), [
      { type: "subscribe", feed: TEAM, after: "1:1" },
      { type: "subscribe", feed: TEAM2 },
      { type: "subscribe", feed: RUN },
    ]);
    const resumed = [];
    client.addEventListener("subscribed", (e) => resumed.push(e.detail));
    again.frame({ type: "subscribed", feed: TEAM, cursor: "1:3" });
    assert.deepEqual(resumed, [{ feed: TEAM, head: "1:3", after: "1:1", resumed: true }]);
    assert.equal(client.stats.reconnects, 1);
    assert.equal(client.stats.connects, 2);
    // A successful open starts the backoff over.
    again.drop(1006);
    assert.equal(seen.states.at(-1).delayMs, 100);
  });

  test("1012 and 1001 reconnect promptly, under the first backoff step", async () => {
    for (const [code, prompt] of [[1012, true], [1001, true], [1006, false], [4008, false]]) {
      FakeSocket.instances = [];
      const { client, seen } = makeClient({ random: () => 0.99 });
      const socket = await connected(client, seen, [TEAM]);
      socket.drop(code, "service restart");
      const waiting = seen.states.at(-1);
      assert.equal(waiting.state, "waiting");
      assert.equal(waiting.delayMs < 100, prompt, `${code}: ${waiting.delayMs}`);
      client.close();
    }
  });

  test("1008 and 1009 stop the client (a client bug)", async () => {
    for (const code of [1008, 1009]) {
      FakeSocket.instances = [];
      const { client, seen } = makeClient();
      const socket = await connected(client, seen, [TEAM]);
      socket.drop(code);
      assert.equal(client.state, "failed");
      mock.timers.tick(60_000);
      await settle();
      assert.equal(FakeSocket.instances.length, 1);
    }
  });

  test("4001 with a static token stops; setToken reconnects and resumes", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "1:0" });
    socket.frame({ type: "event", feed: TEAM, cursor: "1:1", data: {} });
    socket.drop(4001, "token expired");
    await settle();
    assert.equal(client.state, "unauthenticated");
    mock.timers.tick(60_000);
    await settle();
    assert.equal(FakeSocket.instances.length, 1);
    client.setToken("tok2");
    await settle();
    const again = last();
    assert.deepEqual(again.protocols, ["gateway.v1", "bearer.tok2"]);
    again.open();
    assert.deepEqual(again.subscribes(), [{ type: "subscribe", feed: TEAM, after: "1:1" }]);
  });

  test("4001 with getToken reconnects with the new token; the same token stops", async () => {
    const tokens = ["t1", "t2", "t2", "t2"];
    const { client, seen } = makeClient({ token: undefined, getToken: async () => tokens.shift() });
    const socket = await connected(client, seen, [TEAM]);
    assert.deepEqual(socket.protocols, ["gateway.v1", "bearer.t1"]);
    socket.drop(4001);
    await settle();
    assert.equal(client.state, "waiting");
    mock.timers.tick(1000);
    await settle();
    const second = last();
    assert.deepEqual(second.protocols, ["gateway.v1", "bearer.t2"]);
    second.open();
    second.drop(4001);
    await settle();
    assert.equal(client.state, "unauthenticated");
  });

  test("a socket that never opens is abandoned after connectTimeoutMs", async () => {
    const { client, seen } = makeClient({ connectTimeoutMs: 500 });
    follow(client, seen, TEAM);
    await settle();
    mock.timers.tick(500);
    assert.equal(FakeSocket.instances[0].closedWith.code, 4000);
    assert.equal(client.state, "waiting");
  });

  test("close() stops everything", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    client.close();
    assert.equal(socket.closedWith.code, 1000);
    assert.equal(client.state, "closed");
    socket.drop(1006);
    mock.timers.tick(60_000);
    await settle();
    assert.equal(FakeSocket.instances.length, 1);
    assert.throws(() => client.subscribe(TEAM2), /closed/);
  });
});

describe("feed errors and restarts", () => {
  test("epoch_restarted moves the cursor, tells the app, and resubscribes from it", async () => {
    const { client, seen } = makeClient();
    const restarts = [];
    const socket = await connected(client, seen, [
      { feed: TEAM, opts: { onRestart: (d) => restarts.push(d) } },
    ]);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "1:3" });
    socket.frame({ type: "event", feed: TEAM, cursor: "1:3", data: {} });
    socket.frame({ type: "epoch_restarted", feed: TEAM, cursor: "2:0" });
    assert.deepEqual(restarts, [{ feed: TEAM, cursor: "2:0", previous: "1:3" }]);
    assert.deepEqual(socket.subscribes().at(-1), { type: "subscribe", feed: TEAM, after: "2:0" });
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "2:1" });
    socket.frame({ type: "event", feed: TEAM, cursor: "2:1", data: {} });
    assert.deepEqual(
      seen.events.map((e) => e.cursor),
      ["1:3", "2:1"],
    );
    assert.equal(client.stats.restarts, 1);
  });

  test("not_found and unavailable retry that feed alone with backoff", async () => {
    const { client, seen } = makeClient();
    const errors = [];
    const socket = await connected(client, seen, [
      { feed: TEAM, opts: { onError: (d) => errors.push(d) } },
      TEAM2,
    ]);
    socket.frame({ type: "subscribed", feed: TEAM2, cursor: "1:0" });
    socket.frame({ type: "error", feed: TEAM, code: "not_found", message: "no such feed" });
    assert.deepEqual(errors, [
      { feed: TEAM, code: "not_found", message: "no such feed", retrying: true, delayMs: 50 },
    ]);
    assert.equal(client.feeds()[0].status, "retrying");
    mock.timers.tick(50);
    assert.equal(socket.subscribes().length, 3);
    socket.frame({ type: "error", feed: TEAM, code: "unavailable", message: "redis" });
    assert.equal(errors[1].delayMs, 100);
    mock.timers.tick(100);
    socket.frame({ type: "subscribed", feed: TEAM, cursor: "1:0" });
    assert.equal(client.feeds()[0].status, "live");
    assert.equal(FakeSocket.instances.length, 1); // the socket and the other feed went on
  });

  test("other feed errors end that subscription only", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM, TEAM2]);
    socket.frame({ type: "error", feed: TEAM, code: "invalid_cursor", message: "past the head" });
    mock.timers.tick(60_000);
    assert.equal(socket.subscribes().length, 2);
    assert.deepEqual(
      client.feeds().map((f) => f.status),
      ["ended", "pending"],
    );
    socket.drop(1006);
    mock.timers.tick(1000);
    await settle();
    last().open();
    assert.deepEqual(last().subscribes(), [{ type: "subscribe", feed: TEAM2 }]);
    assert.equal(seen.errors[0].retrying, false);
  });

  test("an error without a feed is reported and keeps the socket", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    socket.frame({ type: "error", code: "unauthenticated", message: "other sub" });
    assert.deepEqual(seen.errors, [{ code: "unauthenticated", message: "other sub", retrying: false }]);
    assert.equal(client.state, "open");
  });
});

describe("tokens", () => {
  test("setToken on the open socket sends auth", async () => {
    const { client, seen } = makeClient();
    const socket = await connected(client, seen, [TEAM]);
    client.setToken("fresh");
    assert.deepEqual(socket.sent.at(-1), { type: "auth", token: "fresh" });
    assert.equal(client.stats.refreshes, 1);
  });

  test("with getToken, the token is refreshed on the open socket before it expires", async () => {
    const now = Date.now();
    const first = jwt({ exp: Math.floor(now / 1000) + 100 });
    const second = jwt({ exp: Math.floor(now / 1000) + 3600 });
    const tokens = [first, second];
    const { client, seen } = makeClient({ token: undefined, getToken: async () => tokens.shift() });
    const socket = await connected(client, seen, [TEAM]);
    // At three quarters of the remaining lifetime (more than the 60 s lead).
    mock.timers.tick(60_000);
    await settle();
    assert.equal(socket.sent.filter((m) => m.type === "auth").length, 0);
    mock.timers.tick(20_000);
    await settle();
    assert.deepEqual(socket.sent.at(-1), { type: "auth", token: second });
    assert.equal(client.state, "open");
  });
});

describe("options", () => {
  test("bad options are refused", () => {
    assert.throws(() => new GatewayClient({ token: "t", WebSocket: FakeSocket }), /url/);
    assert.throws(() => new GatewayClient({ url: "http://h", WebSocket: FakeSocket }), /token/);
    assert.throws(() => new GatewayClient({ url: "http://h", token: "t" }), /WebSocket/);
    assert.throws(
      () => new GatewayClient({ url: "http://h", token: "t", WebSocket: FakeSocket, cursors: { [TEAM]: "x" } }),
      /cursor/,
    );
    const { client } = makeClient();
    assert.throws(() => client.subscribe("nope/x"), /feed/);
    assert.throws(() => client.subscribe(TEAM, { after: "bad" }), /after/);
  });
});
