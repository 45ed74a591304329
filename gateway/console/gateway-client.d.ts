// Types of gateway-client.js: follow many feeds of an agent gateway over one WebSocket
// (the gateway.v1 protocol, docs/protocol.md).

/** `"<epoch>:<offset>"`, both decimal integers in 0..2^53-1. */
export type Cursor = string;

/** `"team/<team id>"` or `"run/<thread id>/<run id>"`. */
export type FeedName = string;

export declare const SUBPROTOCOL: "gateway.v1";
export declare const BEARER_PREFIX: "bearer.";

export interface ParsedCursor {
  epoch: number;
  offset: number;
}

export declare function parseCursor(text: unknown): ParsedCursor | null;
export declare function compareCursors(a: ParsedCursor, b: ParsedCursor): number;
export declare function backoffDelay(
  attempt: number,
  backoff: { minMs: number; maxMs: number },
  random?: () => number,
): number;
/** The JWT's `exp` in milliseconds, read without verification; null if there is none. */
export declare function tokenExpiry(token: string): number | null;
/** `http(s)://host[/prefix]` becomes `ws(s)://host[/prefix]/v1/ws`; `ws(s)://` is kept. */
export declare function websocketUrl(url: string, base?: string): string;
export declare function feedKind(feed: unknown): "team" | "run" | null;

/** The subset of the WHATWG WebSocket this client uses (browsers, Node 22+, `ws`). */
export interface WebSocketLike {
  readonly readyState: number;
  readonly protocol: string;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (
  url: string,
  protocols: string[],
  options?: { headers?: Record<string, string>; perMessageDeflate?: boolean },
) => WebSocketLike;

export interface GatewayClientOptions {
  /** The gateway's base URL (`https://gw.example`) or its `wss://.../v1/ws` URL. */
  url: string;
  /** A token (JWT with the `subscribe` scope); or give `getToken`. */
  token?: string;
  /** Called before every connection attempt and to refresh the token on the open socket. */
  getToken?: () => string | Promise<string>;
  /** Defaults to `globalThis.WebSocket`; Node 20 has none: pass `ws`'s. */
  WebSocket?: WebSocketConstructor;
  /**
   * How the token travels: `"subprotocol"` (default: `bearer.<JWT>` next to
   * `gateway.v1`, what browsers can do) or `"header"` (`Authorization: Bearer`, for `ws`).
   */
  auth?: "subprotocol" | "header";
  /** Full-jitter reconnect backoff bounds; defaults 250 ms and 10 s. */
  backoff?: { minMs?: number; maxMs?: number };
  /** A connection attempt that has not opened after this long is abandoned (10 s). */
  connectTimeoutMs?: number;
  /**
   * Refresh the token on the open socket before its `exp` (an `auth` message with a token
   * from `getToken`). Default: true when `getToken` is given.
   */
  refreshToken?: boolean;
  /** Cursors to resume from, e.g. what `cursors()` returned before a reload. */
  cursors?: Record<FeedName, Cursor>;
  /** The random source of the jitter (tests make it deterministic). */
  random?: () => number;
}

export interface FeedEvent<T = unknown> {
  feed: FeedName;
  /** The item's cursor; for prelude frames the cursor the subscription joined at. */
  cursor: Cursor;
  /** A TeamItem (team feeds) or an AG-UI event (run feeds). */
  data: T;
  /**
   * True for the run prelude (RUN_STARTED, STATE_SNAPSHOT, MESSAGES_SNAPSHOT and the start
   * events of what is open), sent when a run is joined or resumed past its start: a
   * restatement of the run so far, not new items. It does not move the feed's cursor.
   */
  prelude: boolean;
}

export interface RestartDetail {
  feed: FeedName;
  /** Where the feed resumes; items between `previous` and it may be missing. */
  cursor: Cursor;
  previous: Cursor | null;
}

export interface FeedErrorDetail {
  feed: FeedName;
  code: string;
  message: string;
  /** True for not_found and unavailable: the client resubscribes after `delayMs`. */
  retrying: boolean;
  delayMs?: number;
}

export interface SubscribedDetail {
  feed: FeedName;
  /** The feed's head when the subscription opened (information only). */
  head: Cursor | null;
  /** The cursor this subscription resumed after (null: from the start). */
  after: Cursor | null;
  /** True when this is a resubscription after a reconnect, restart or retry. */
  resumed: boolean;
}

export interface SubscribeOptions<T = unknown> {
  /**
   * Start after this cursor; `null`: from the start of the retained history; omitted: the
   * cursor the client holds for the feed (from `cursors` or earlier events), if any.
   */
  after?: Cursor | null;
  onEvent?: (event: FeedEvent<T>) => void;
  onRestart?: (detail: RestartDetail) => void;
  onError?: (detail: FeedErrorDetail) => void;
  onSubscribed?: (detail: SubscribedDetail) => void;
}

export type FeedStatus = "waiting" | "pending" | "live" | "retrying" | "ended";

export interface SubscriptionHandle {
  readonly feed: FeedName;
  readonly cursor: Cursor | null;
  readonly status: FeedStatus | "unsubscribed";
  unsubscribe(): void;
}

export interface FeedInfo {
  feed: FeedName;
  status: FeedStatus;
  cursor: Cursor | null;
  head: Cursor | null;
  /** Subscribe messages sent for this feed (the first, then every resume). */
  subscriptions: number;
  error: { code: string; message: string } | null;
}

export type ConnectionState =
  | "idle"
  | "connecting"
  | "open"
  | "waiting"
  | "unauthenticated"
  | "failed"
  | "closed";

export interface ClientStats {
  /** Connections that opened. */
  connects: number;
  /** Connections that opened after the first one. */
  reconnects: number;
  /** Event frames at or before their feed's cursor, not delivered (a gateway bug). */
  duplicates: number;
  /** Frames of subscriptions already ended or replaced, ignored (expected, harmless). */
  stale: number;
  /** `epoch_restarted` frames. */
  restarts: number;
  /** Tokens sent on an open socket. */
  refreshes: number;
  lastClose: { code: number | null; reason: string } | null;
}

export interface StateDetail {
  state: ConnectionState;
  previous: ConnectionState;
  /** "open": true when this is not the first connection. */
  reconnect?: boolean;
  /** "waiting": the delay before the next attempt, and the attempt's number. */
  delayMs?: number;
  attempt?: number;
  /** The close code and reason that led here (null code: no close frame). */
  code?: number | null;
  reason?: string;
}

export interface ClientErrorDetail {
  feed?: FeedName;
  code: string;
  message: string;
  retrying?: boolean;
  delayMs?: number;
}

export interface GatewayClientEventMap {
  state: CustomEvent<StateDetail>;
  close: CustomEvent<{ code: number | null; reason: string }>;
  subscribed: CustomEvent<SubscribedDetail>;
  restart: CustomEvent<RestartDetail>;
  duplicate: CustomEvent<{ feed: FeedName; cursor: Cursor; last: Cursor }>;
  error: CustomEvent<ClientErrorDetail>;
  token: CustomEvent<{ refreshed: true; expiresAt: number | null }>;
}

export declare class GatewayClient extends EventTarget {
  constructor(options: GatewayClientOptions);
  /** The `/v1/ws` URL in use. */
  readonly url: string;
  readonly state: ConnectionState;
  readonly stats: ClientStats;
  /** The last cursor of every feed seen, to persist and pass back as `cursors`. */
  cursors(): Record<FeedName, Cursor>;
  cursor(feed: FeedName): Cursor | null;
  feeds(): FeedInfo[];
  subscribe<T = unknown>(feed: FeedName, options?: SubscribeOptions<T>): SubscriptionHandle;
  /** Stop following; the feed's cursor stays in `cursors()`. */
  unsubscribe(feed: FeedName): void;
  /** Send `auth` on the open socket and use the token for reconnects. */
  setToken(token: string): void;
  connect(): void;
  close(): void;
  addEventListener<K extends keyof GatewayClientEventMap>(
    type: K,
    listener: (event: GatewayClientEventMap[K]) => void,
    options?: boolean | AddEventListenerOptions,
  ): void;
  addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | AddEventListenerOptions,
  ): void;
  removeEventListener<K extends keyof GatewayClientEventMap>(
    type: K,
    listener: (event: GatewayClientEventMap[K]) => void,
    options?: boolean | EventListenerOptions,
  ): void;
  removeEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | EventListenerOptions,
  ): void;
}
