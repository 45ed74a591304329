// gateway-client.js: follow many feeds of an agent gateway over one WebSocket (gateway.v1).
//
// An ES module with no dependencies, for browsers and Node 20+ (pass a WebSocket
// constructor, e.g. from the `ws` package, where there is no global one). The protocol is
// docs/protocol.md; this client keeps its rules:
//
// - A feed's position is the cursor of its last `event` frame. Run-feed prelude frames
//   carry the cursor the subscription joined at and never move it.
// - After any disconnect (network, 1001, 1011, 1012 drain, 4008 too slow, 4001 with a
//   fresh token) it reconnects with full-jitter backoff (1001/1012 within the first step,
//   anything else from the second on) and
//   resubscribes every feed after its last cursor, so the app sees each item once, in
//   order. 1008 and 1009 stop it (a client bug; retrying would repeat it), and so does a
//   4001 when no new token can be had.
// - `epoch_restarted` moves the feed to the cursor the gateway names, tells the app
//   (items in between may be missing) and resubscribes from there.
// - `not_found` and `unavailable` about a feed are retried for that feed alone, with
//   backoff (a feed that does not exist yet, or whose data was lost, answers not_found).
// - A frame at or before the feed's cursor is never delivered twice: it is counted in
//   `stats.duplicates` and announced with a `duplicate` event. The gateway never sends
//   one, so a count above zero is a bug to report.
//
// Usage:
//
//   import { GatewayClient } from "/console/gateway-client.js";
//   const client = new GatewayClient({ url: "https://gw.example", getToken });
//   client.addEventListener("state", (e) => show(e.detail.state));
//   client.subscribe("team/0190f5a2-...", { onEvent: (ev) => render(ev.data) });
//   ... later: persist(client.cursors()); client.close();

export const SUBPROTOCOL = "gateway.v1";
export const BEARER_PREFIX = "bearer.";

/** Close codes after which reconnecting without a change to the client is pointless. */
const FATAL_CLOSES = new Set([1008, 1009]);
/** Close codes that ask for a prompt reconnect (the node is going away). */
const PROMPT_CLOSES = new Set([1001, 1012]);
const UNAUTHENTICATED_CLOSE = 4001;
/** Feed errors that are retried with backoff; any other error ends the subscription. */
const RETRYABLE_ERRORS = new Set(["not_found", "unavailable"]);
const MAX_CURSOR_PART = Number.MAX_SAFE_INTEGER;
const CURSOR_RE = /^([0-9]+):([0-9]+)$/;
/** setTimeout's longest delay (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** A token is refreshed at most this long before it expires. */
const REFRESH_LEAD_MS = 60_000;

/**
 * Parse an `"<epoch>:<offset>"` cursor; null when it is not one.
 * @param {unknown} text
 * @returns {{epoch: number, offset: number} | null}
 */
export function parseCursor(text) {
  if (typeof text !== "string") return null;
  const m = CURSOR_RE.exec(text);
  if (!m) return null;
  const epoch = Number(m[1]);
  const offset = Number(m[2]);
  if (!(epoch <= MAX_CURSOR_PART && offset <= MAX_CURSOR_PART)) return null;
  return { epoch, offset };
}

/**
 * Order two cursors: negative when a is before b, 0 when equal, positive after.
 * @param {{epoch: number, offset: number}} a
 * @param {{epoch: number, offset: number}} b
 */
export function compareCursors(a, b) {
  return a.epoch !== b.epoch ? a.epoch - b.epoch : a.offset - b.offset;
}

/**
 * Full-jitter backoff: a uniform delay in [0, min(maxMs, minMs * 2^attempt)).
 * @param {number} attempt 0 for the first retry
 * @param {{minMs: number, maxMs: number}} backoff
 * @param {() => number} random
 */
export function backoffDelay(attempt, backoff, random = Math.random) {
  const ceiling = Math.min(backoff.maxMs, backoff.minMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * Math.max(1, ceiling));
}

/**
 * The `exp` claim of a JWT in milliseconds, read without verifying anything (the gateway
 * verifies); null when the token is not a JWT with a numeric `exp`.
 * @param {string} token
 */
export function tokenExpiry(token) {
  const parts = typeof token === "string" ? token.split(".") : [];
  if (parts.length !== 3) return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const padded = b64 + "=".repeat((4 - (b64.length % 4)) % 4);
    const binary = atob(padded);
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const claims = JSON.parse(new TextDecoder().decode(bytes));
    return typeof claims.exp === "number" && Number.isFinite(claims.exp) ? claims.exp * 1000 : null;
  } catch {
    return null;
  }
}

/**
 * The `/v1/ws` URL for a gateway: `http(s)://host[:port][/prefix]` becomes
 * `ws(s)://host[:port][/prefix]/v1/ws`; a `ws(s)://` URL is used as given.
 * @param {string} url
 * @param {string} [base] resolves a relative url (browsers: the page's location)
 */
export function websocketUrl(url, base) {
  const u = new URL(url, base);
  if (u.protocol === "ws:" || u.protocol === "wss:") return u.href;
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new TypeError(`url: expected http(s):// or ws(s)://, got ${u.protocol}`);
  }
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  u.pathname = u.pathname.replace(/\/+$/, "") + "/v1/ws";
  u.search = "";
  u.hash = "";
  return u.href;
}

/** The kind of a feed name: "team", "run", or null for anything else. */
export function feedKind(feed) {
  if (typeof feed !== "string") return null;
  if (feed.startsWith("team/")) return "team";
  if (feed.startsWith("run/")) return "run";
  return null;
}

const WS_OPEN = 1;

/** One feed this client follows (internal). */
class Feed {
  constructor(name, handlers) {
    this.name = name;
    this.kind = feedKind(name);
    this.handlers = handlers;
    /** "pending" (subscribe sent), "live", "retrying", "waiting" (no socket), "ended" */
    this.status = "waiting";
    /** The cursor sent in the current subscription's `after` (null: none). */
    this.after = null;
    /** The cursor prelude frames of the current subscription carry (run feeds). */
    this.joinAt = null;
    this.inPrelude = false;
    this.firstFrame = true;
    this.head = null;
    this.retryAttempt = 0;
    this.retryTimer = null;
    this.subscriptions = 0;
    this.lastError = null;
  }
}

export class GatewayClient extends EventTarget {
  /**
   * @param {import("./gateway-client.js").GatewayClientOptions} options
   */
  constructor(options = {}) {
    super();
    if (typeof options.url !== "string") throw new TypeError("url: required");
    if (typeof options.token !== "string" && typeof options.getToken !== "function") {
      throw new TypeError("token or getToken: one is required");
    }
    const base = typeof location !== "undefined" ? location.href : undefined;
    this.url = websocketUrl(options.url, base);
    this._token = typeof options.token === "string" ? options.token : null;
    this._getToken = typeof options.getToken === "function" ? options.getToken : null;
    this._WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this._WebSocket !== "function") {
      throw new TypeError(
        "WebSocket: no global WebSocket here (Node 20): pass one, e.g. `import WebSocket from \"ws\"`",
      );
    }
    this._auth = options.auth ?? "subprotocol";
    if (this._auth !== "subprotocol" && this._auth !== "header") {
      throw new TypeError('auth: "subprotocol" or "header"');
    }
    const backoff = options.backoff ?? {};
    this._backoff = { minMs: backoff.minMs ?? 250, maxMs: backoff.maxMs ?? 10_000 };
    if (!(this._backoff.minMs > 0 && this._backoff.maxMs >= this._backoff.minMs)) {
      throw new RangeError("backoff: need 0 < minMs <= maxMs");
    }
    this._connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    this._refresh = options.refreshToken ?? this._getToken !== null;
    this._random = options.random ?? Math.random;
    /** @type {Map<string, string>} */
    this._cursors = new Map(Object.entries(options.cursors ?? {}));
    for (const [feed, cursor] of this._cursors) {
      if (parseCursor(cursor) === null) throw new TypeError(`cursors[${feed}]: not a cursor`);
    }
    /** @type {Map<string, Feed>} */
    this._feeds = new Map();
    this._socket = null;
    this._socketToken = null;
    this._state = "idle";
    this._attempt = 0;
    this._reconnectTimer = null;
    this._connectTimer = null;
    this._refreshTimer = null;
    this._generation = 0;
    this._closed = false;
    this._opened = false;
    this._stats = {
      connects: 0,
      reconnects: 0,
      duplicates: 0,
      stale: 0,
      restarts: 0,
      refreshes: 0,
      lastClose: null,
    };
  }

  /** "idle", "connecting", "open", "waiting", "unauthenticated", "failed" or "closed". */
  get state() {
    return this._state;
  }

  /** Counters: connects, reconnects, duplicates, stale, restarts, refreshes, lastClose. */
  get stats() {
    return { ...this._stats };
  }

  /** The last cursor of every feed this client has seen, to persist and pass back. */
  cursors() {
    return Object.fromEntries(this._cursors);
  }

  /** The cursor of one feed, or null. */
  cursor(feed) {
    return this._cursors.get(feed) ?? null;
  }

  /** Every followed feed's status, cursor and head. */
  feeds() {
    return [...this._feeds.values()].map((f) => ({
      feed: f.name,
      status: f.status,
      cursor: this._cursors.get(f.name) ?? null,
      head: f.head,
      subscriptions: f.subscriptions,
      error: f.lastError,
    }));
  }

  /**
   * Follow `feed` (replacing its handlers if already followed). `after` starts after that
   * cursor (null: from the start of the retained history); omitted, the client resumes
   * from the cursor it holds for the feed, if any.
   */
  subscribe(feed, options = {}) {
    if (feedKind(feed) === null) throw new TypeError(`feed: expected team/... or run/..., got ${feed}`);
    if (this._closed) throw new Error("the client is closed");
    if (options.after !== undefined) {
      if (options.after === null) this._cursors.delete(feed);
      else if (parseCursor(options.after) === null) throw new TypeError(`after: not a cursor: ${options.after}`);
      else this._cursors.set(feed, options.after);
    }
    const handlers = {
      onEvent: options.onEvent,
      onRestart: options.onRestart,
      onError: options.onError,
      onSubscribed: options.onSubscribed,
    };
    let entry = this._feeds.get(feed);
    if (entry) {
      entry.handlers = handlers;
      if (options.after === undefined && entry.status !== "ended") return this._handle(feed);
      this._cancelRetry(entry);
    } else {
      entry = new Feed(feed, handlers);
      this._feeds.set(feed, entry);
    }
    // Otherwise the feed is subscribed when the socket opens: connecting now would
    // jump a backoff under way.
    if (this._isOpen()) this._sendSubscribe(entry);
    else if (this._state === "idle") this.connect();
    return this._handle(feed);
  }

  /** Stop following `feed`. Its cursor stays in cursors() (a later subscribe resumes). */
  unsubscribe(feed) {
    const entry = this._feeds.get(feed);
    if (!entry) return;
    this._cancelRetry(entry);
    this._feeds.delete(feed);
    if (this._isOpen()) this._send({ type: "unsubscribe", feed });
  }

  /**
   * Use `token` from now on: sent at once on the open socket (`auth`), and on every
   * reconnect. Restarts a client stopped by a 4001.
   */
  setToken(token) {
    if (typeof token !== "string" || token === "") throw new TypeError("token: a non-empty string");
    this._token = token;
    if (this._isOpen()) {
      this._send({ type: "auth", token });
      this._socketToken = token;
      this._stats.refreshes += 1;
      this._emit("token", { refreshed: true, expiresAt: tokenExpiry(token) });
      this._scheduleRefresh(token);
    } else if (this._state === "unauthenticated") {
      this._attempt = 0;
      this.connect();
    }
  }

  /** Start connecting (subscribe() does this by itself). */
  connect() {
    if (this._closed) throw new Error("the client is closed");
    if (this._state === "connecting" || this._state === "open") return;
    this._clearTimer("_reconnectTimer");
    void this._open();
  }

  /** Close the socket for good; no reconnect. */
  close() {
    if (this._closed) return;
    this._closed = true;
    this._generation += 1;
    for (const timer of ["_reconnectTimer", "_connectTimer", "_refreshTimer"]) this._clearTimer(timer);
    for (const entry of this._feeds.values()) this._cancelRetry(entry);
    const socket = this._socket;
    this._socket = null;
    if (socket) this._detach(socket, 1000, "client closed");
    this._setState("closed", {});
  }

  // -- connection ---------------------------------------------------------------------

  async _open() {
    const generation = ++this._generation;
    this._setState("connecting", { attempt: this._attempt });
    let token;
    try {
      token = await this._currentToken();
    } catch (err) {
      if (generation !== this._generation) return;
      this._emit("error", { code: "token_unavailable", message: String(err), retrying: true });
      this._retryConnection({ code: null, reason: "getToken failed" });
      return;
    }
    if (generation !== this._generation) return;
    const protocols = [SUBPROTOCOL];
    let socket;
    try {
      if (this._auth === "header") {
        socket = new this._WebSocket(this.url, protocols, {
          headers: { Authorization: `Bearer ${token}` },
          perMessageDeflate: false,
        });
      } else {
        protocols.push(BEARER_PREFIX + token);
        socket = new this._WebSocket(this.url, protocols);
      }
    } catch (err) {
      this._emit("error", { code: "connect_failed", message: String(err), retrying: true });
      this._retryConnection({ code: null, reason: String(err) });
      return;
    }
    this._socket = socket;
    this._socketToken = token;
    socket.onopen = () => this._onOpen(socket);
    socket.onmessage = (ev) => this._onMessage(socket, ev.data);
    socket.onclose = (ev) => this._onClose(socket, ev.code, ev.reason);
    socket.onerror = () => {}; // always followed by close, which decides what to do
    this._connectTimer = setTimeout(() => {
      if (this._socket === socket && socket.readyState !== WS_OPEN) {
        this._lost(socket, null, "connect timeout");
      }
    }, Math.min(this._connectTimeoutMs, MAX_TIMER_MS));
  }

  async _currentToken() {
    if (this._getToken) {
      const token = await this._getToken();
      if (typeof token !== "string" || token === "") throw new TypeError("getToken returned no token");
      this._token = token;
    }
    return this._token;
  }

  _onOpen(socket) {
    if (socket !== this._socket) return;
    this._clearTimer("_connectTimer");
    if (socket.protocol !== SUBPROTOCOL) {
      this._emit("error", { code: "wrong_subprotocol", message: `server chose ${socket.protocol}` });
      this._lost(socket, null, "wrong subprotocol");
      return;
    }
    this._stats.connects += 1;
    const reconnect = this._opened;
    if (reconnect) this._stats.reconnects += 1;
    this._opened = true;
    this._attempt = 0;
    // Subscribe before telling listeners, so one that subscribes in its handler does not
    // see its feed subscribed twice.
    const previous = this._state;
    this._state = "open";
    for (const entry of this._feeds.values()) {
      if (entry.status === "ended") continue;
      this._cancelRetry(entry);
      this._sendSubscribe(entry);
    }
    if (this._refresh && this._getToken) this._scheduleRefresh(this._socketToken);
    this._emit("state", { state: "open", previous, reconnect });
  }

  _onClose(socket, code, reason) {
    if (socket !== this._socket) return;
    this._stats.lastClose = { code, reason: String(reason ?? "") };
    this._emit("close", { code, reason: String(reason ?? "") });
    this._socket = null;
    this._afterLoss(code, String(reason ?? ""));
  }

  /** Drop `socket` ourselves (timeout, protocol error) and reconnect. */
  _lost(socket, code, reason) {
    if (socket !== this._socket) return;
    this._socket = null;
    this._detach(socket, 4000, reason);
    this._stats.lastClose = { code, reason };
    this._emit("close", { code, reason });
    this._afterLoss(code, reason);
  }

  _detach(socket, code, reason) {
    socket.onopen = socket.onmessage = socket.onclose = null;
    socket.onerror = () => {}; // `ws` throws an error event that has no listener
    try {
      socket.close(code, reason);
    } catch {
      // already closing, or a code the implementation refuses: nothing to release
    }
  }

  _afterLoss(code, reason) {
    this._clearTimer("_connectTimer");
    this._clearTimer("_refreshTimer");
    for (const entry of this._feeds.values()) {
      this._cancelRetry(entry);
      if (entry.status !== "ended") entry.status = "waiting";
    }
    if (this._closed) return;
    if (code !== null && FATAL_CLOSES.has(code)) {
      this._setState("failed", { code, reason });
      return;
    }
    if (code === UNAUTHENTICATED_CLOSE) {
      void this._reauthenticate(code, reason);
      return;
    }
    this._retryConnection({ code, reason });
  }

  /** After a 4001: reconnect only with a token other than the one just refused. */
  async _reauthenticate(code, reason) {
    const rejected = this._socketToken;
    const generation = ++this._generation;
    let fresh = this._token;
    if (this._getToken !== null) {
      try {
        fresh = await this._currentToken();
      } catch {
        fresh = rejected;
      }
    }
    if (generation !== this._generation || this._closed) return;
    if (fresh === rejected) {
      this._setState("unauthenticated", { code, reason });
      return;
    }
    this._retryConnection({ code, reason });
  }

  _retryConnection({ code, reason }) {
    if (this._closed) return;
    // A draining node (1012) or one going away (1001) spreads its closes over a window:
    // come back within the first step. Any other loss (a crash, a network failure, too
    // slow) starts one step higher, so that a crowd of clients does not return at once.
    const prompt = code !== null && PROMPT_CLOSES.has(code);
    const delayMs = prompt
      ? Math.floor(this._random() * this._backoff.minMs)
      : backoffDelay(this._attempt + 1, this._backoff, this._random);
    this._attempt += 1;
    this._setState("waiting", { code, reason, delayMs, attempt: this._attempt });
    this._reconnectTimer = setTimeout(() => {
      this._reconnectTimer = null;
      if (!this._closed) void this._open();
    }, delayMs);
  }

  _scheduleRefresh(token) {
    this._clearTimer("_refreshTimer");
    if (!this._refresh || !this._getToken) return;
    const exp = tokenExpiry(token);
    if (exp === null) return;
    const left = exp - Date.now();
    const delay = Math.max(0, Math.min(MAX_TIMER_MS, Math.max(left - REFRESH_LEAD_MS, left * 0.75)));
    const generation = this._generation;
    this._refreshTimer = setTimeout(async () => {
      this._refreshTimer = null;
      let fresh;
      try {
        fresh = await this._getToken();
      } catch (err) {
        this._emit("error", { code: "token_unavailable", message: String(err), retrying: false });
        return;
      }
      if (generation !== this._generation || !this._isOpen()) return;
      if (typeof fresh === "string" && fresh !== "") this.setToken(fresh);
    }, delay);
  }

  // -- frames -------------------------------------------------------------------------

  _onMessage(socket, data) {
    if (socket !== this._socket) return;
    if (typeof data !== "string") {
      this._emit("error", { code: "invalid_frame", message: "binary frame from the server" });
      return;
    }
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      this._emit("error", { code: "invalid_frame", message: "a frame that is not JSON" });
      return;
    }
    if (frame === null || typeof frame !== "object") return;
    switch (frame.type) {
      case "event":
        return this._onEvent(frame);
      case "subscribed":
        return this._onSubscribed(frame);
      case "epoch_restarted":
        return this._onRestarted(frame);
      case "error":
        return this._onError(frame);
      default:
        return; // a message type of a later protocol version
    }
  }

  _onSubscribed(frame) {
    const entry = this._feeds.get(frame.feed);
    if (!entry || entry.status !== "pending") return;
    entry.status = "live";
    entry.head = typeof frame.cursor === "string" ? frame.cursor : null;
    entry.retryAttempt = 0;
    entry.lastError = null;
    const detail = {
      feed: entry.name,
      head: entry.head,
      after: entry.after,
      resumed: entry.after !== null && entry.subscriptions > 1,
    };
    this._emit("subscribed", detail);
    this._call(entry.handlers.onSubscribed, detail);
  }

  _onEvent(frame) {
    const entry = this._feeds.get(frame.feed);
    if (!entry || entry.status !== "live") {
      // An ended or replaced subscription's frames still on the wire.
      this._stats.stale += 1;
      return;
    }
    const at = parseCursor(frame.cursor);
    if (at === null) {
      this._emit("error", { feed: entry.name, code: "invalid_frame", message: `bad cursor ${frame.cursor}` });
      return;
    }
    const first = entry.firstFrame;
    entry.firstFrame = false;
    if (entry.inPrelude) {
      if (entry.joinAt === null && first && frame.data?.type === "RUN_STARTED") {
        // Joined without a cursor but past the run's start (its start was trimmed): the
        // prelude carries the position the gateway joined at.
        entry.joinAt = at;
      }
      if (entry.joinAt !== null && compareCursors(at, entry.joinAt) === 0) {
        const last = parseCursor(this._cursors.get(entry.name));
        if (last === null || compareCursors(at, last) > 0) this._cursors.set(entry.name, frame.cursor);
        const prelude = !(first && entry.after === null && at.offset <= 1);
        return this._deliver(entry, frame, prelude);
      }
      entry.inPrelude = false;
    }
    const last = parseCursor(this._cursors.get(entry.name));
    if (last !== null && compareCursors(at, last) <= 0) {
      this._stats.duplicates += 1;
      this._emit("duplicate", { feed: entry.name, cursor: frame.cursor, last: this._cursors.get(entry.name) });
      return;
    }
    this._cursors.set(entry.name, frame.cursor);
    this._deliver(entry, frame, false);
  }

  _deliver(entry, frame, prelude) {
    this._call(entry.handlers.onEvent, {
      feed: entry.name,
      cursor: frame.cursor,
      data: frame.data,
      prelude,
    });
  }

  _onRestarted(frame) {
    const entry = this._feeds.get(frame.feed);
    if (!entry || entry.status !== "live") {
      this._stats.stale += 1;
      return;
    }
    if (parseCursor(frame.cursor) === null) {
      this._emit("error", { feed: entry.name, code: "invalid_frame", message: `bad cursor ${frame.cursor}` });
      return;
    }
    const previous = this._cursors.get(entry.name) ?? null;
    this._cursors.set(entry.name, frame.cursor);
    this._stats.restarts += 1;
    const detail = { feed: entry.name, cursor: frame.cursor, previous };
    this._emit("restart", detail);
    this._call(entry.handlers.onRestart, detail);
    if (this._feeds.get(entry.name) === entry && entry.status === "live" && this._isOpen()) {
      this._sendSubscribe(entry);
    }
  }

  _onError(frame) {
    const code = typeof frame.code === "string" ? frame.code : "unknown";
    const message = typeof frame.message === "string" ? frame.message : "";
    if (typeof frame.feed !== "string") {
      this._emit("error", { code, message, retrying: false });
      return;
    }
    const entry = this._feeds.get(frame.feed);
    // Only the answer to a subscription in force counts (not a late one about an old one).
    if (!entry || (entry.status !== "pending" && entry.status !== "live")) return;
    const retrying = RETRYABLE_ERRORS.has(code);
    entry.lastError = { code, message };
    const detail = { feed: entry.name, code, message, retrying };
    if (retrying) {
      entry.status = "retrying";
      const delayMs = backoffDelay(entry.retryAttempt, this._backoff, this._random);
      entry.retryAttempt += 1;
      detail.delayMs = delayMs;
      entry.retryTimer = setTimeout(() => {
        entry.retryTimer = null;
        if (this._feeds.get(entry.name) === entry && this._isOpen()) this._sendSubscribe(entry);
      }, delayMs);
    } else {
      entry.status = "ended";
    }
    this._emit("error", detail);
    this._call(entry.handlers.onError, detail);
  }

  // -- helpers ------------------------------------------------------------------------

  _sendSubscribe(entry) {
    const after = this._cursors.get(entry.name) ?? null;
    const message = { type: "subscribe", feed: entry.name };
    if (after !== null) message.after = after;
    entry.status = "pending";
    entry.after = after;
    entry.joinAt = parseCursor(after);
    entry.inPrelude = entry.kind === "run";
    entry.firstFrame = true;
    entry.subscriptions += 1;
    this._send(message);
  }

  _send(message) {
    this._socket.send(JSON.stringify(message));
  }

  _isOpen() {
    return this._socket !== null && this._socket.readyState === WS_OPEN && this._state === "open";
  }

  _cancelRetry(entry) {
    if (entry.retryTimer !== null) {
      clearTimeout(entry.retryTimer);
      entry.retryTimer = null;
    }
  }

  _clearTimer(name) {
    if (this[name] !== null) {
      clearTimeout(this[name]);
      this[name] = null;
    }
  }

  _handle(feed) {
    const client = this;
    return {
      feed,
      get cursor() {
        return client.cursor(feed);
      },
      get status() {
        return client._feeds.get(feed)?.status ?? "unsubscribed";
      },
      unsubscribe: () => client.unsubscribe(feed),
    };
  }

  _setState(state, detail) {
    const previous = this._state;
    this._state = state;
    this._emit("state", { state, previous, ...detail });
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  _call(handler, detail) {
    if (typeof handler !== "function") return;
    try {
      handler(detail);
    } catch (err) {
      // An app handler's bug must not break the stream of other feeds; report it.
      this._emit("error", { feed: detail.feed, code: "handler_failed", message: String(err) });
      if (typeof globalThis.reportError === "function") globalThis.reportError(err);
    }
  }
}
