// Compiled (never run) by tests/test_console_files.py with `tsc --noEmit --strict`: every
// public API of gateway-client.js used as an app would, against gateway-client.d.ts, and
// misuses that the types must refuse (@ts-expect-error fails the build if they do not).
import {
  BEARER_PREFIX,
  GatewayClient,
  SUBPROTOCOL,
  backoffDelay,
  compareCursors,
  feedKind,
  parseCursor,
  tokenExpiry,
  websocketUrl,
  type ClientStats,
  type ConnectionState,
  type Cursor,
  type FeedEvent,
  type FeedInfo,
  type GatewayClientOptions,
  type SubscriptionHandle,
} from "../../gateway/console/gateway-client.js";

// What `import WebSocket from "ws"` gives on Node 20 (its types are not installed here).
declare const NodeWebSocket: NonNullable<GatewayClientOptions["WebSocket"]>;

interface TeamItem {
  kind: "event";
  cursor: { epoch: number; offset: number };
  source: { kind: string };
  event: { type: string; data: Record<string, unknown> };
}

const options: GatewayClientOptions = {
  url: "https://gw.example",
  getToken: async () => "jwt",
  WebSocket: NodeWebSocket,
  auth: "header",
  backoff: { minMs: 100, maxMs: 5000 },
  connectTimeoutMs: 5000,
  refreshToken: true,
  cursors: { "team/x": "1:2" },
  random: Math.random,
};
const client = new GatewayClient(options);
const url: string = client.url;
const state: ConnectionState = client.state;
const stats: ClientStats = client.stats;
const handle: SubscriptionHandle = client.subscribe<TeamItem>("team/x", {
  after: null,
  onEvent: (ev: FeedEvent<TeamItem>) => {
    const type: string = ev.data.event.type;
    const prelude: boolean = ev.prelude;
    void type;
    void prelude;
  },
  onRestart: ({ feed, cursor, previous }) => void [feed, cursor, previous],
  onError: ({ code, retrying, delayMs }) => void [code, retrying, delayMs],
  onSubscribed: ({ head, after, resumed }) => void [head, after, resumed],
});
const cursor: Cursor | null = handle.cursor;
handle.unsubscribe();
client.unsubscribe("team/x");
const saved: Record<string, Cursor> = client.cursors();
const one: Cursor | null = client.cursor("team/x");
const feeds: FeedInfo[] = client.feeds();
client.setToken("fresh");
client.connect();
client.addEventListener("state", (e) => {
  const s: ConnectionState = e.detail.state;
  const delay: number | undefined = e.detail.delayMs;
  void [s, delay];
});
client.addEventListener("restart", (e) => void e.detail.cursor);
client.addEventListener("duplicate", (e) => void e.detail.last);
client.addEventListener("subscribed", (e) => void e.detail.resumed);
client.addEventListener("error", (e) => void e.detail.code);
client.addEventListener("token", (e) => void e.detail.expiresAt);
client.addEventListener("close", (e) => void e.detail.code);
client.close();

const parsed = parseCursor("1:2");
if (parsed) void compareCursors(parsed, { epoch: 1, offset: 3 });
void [backoffDelay(1, { minMs: 1, maxMs: 2 }), tokenExpiry("a.b.c"), websocketUrl("http://h")];
const kind: "team" | "run" | null = feedKind("run/a/b");
const constants: [string, string] = [SUBPROTOCOL, BEARER_PREFIX];
void [url, state, stats, cursor, saved, one, feeds, kind, constants];

// @ts-expect-error: url is required
new GatewayClient({ token: "t" });
// @ts-expect-error: auth is "subprotocol" or "header"
new GatewayClient({ url: "u", token: "t", auth: "query" });
// @ts-expect-error: an event's cursor is a string
const wrong: number = client.cursors()["team/x"];
// @ts-expect-error: no such state
const nope: ConnectionState = "reconnecting";
void [wrong, nope];
