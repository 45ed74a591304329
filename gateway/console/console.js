// console.js: the gateway console page. Sign in with a token (from the URL fragment
// `#token=<JWT>` in dev mode: fragments never reach a server), list the tenant's active
// feeds (GET /v1/feeds), watch several at once over one WebSocket (gateway-client.js):
// team items with their sources, runs as a chat with tool calls and state, each feed's
// cursor and status, the connection's state, reconnects, resumes and epoch restarts.
//
// Everything from the gateway is rendered with textContent, never as HTML.
// window.gatewayConsole exposes what the page received, for tests and the devtools.

import { GatewayClient, feedKind } from "./gateway-client.js";
import { describeTeamItem, foldRun, newRunView } from "./folds.js";

/** Bounds: items kept per watched team feed, received entries kept per feed. */
const MAX_ITEMS = 500;
const MAX_RECEIVED = 5000;
const PAGE_SIZE = 20;
const LIST_REFRESH_MS = 10_000;
const TOKEN_KEY = "gateway-console-token";

const $ = (id) => document.getElementById(id);

/** The gateway's base URL: `#gateway=` if given, else the parent of /console/. */
function gatewayBase(params) {
  const given = params.get("gateway");
  return new URL(given ?? "..", location.href).href.replace(/\/?$/, "/");
}

const fragment = new URLSearchParams(location.hash.slice(1));
const base = gatewayBase(fragment);

const app = {
  client: null,
  token: null,
  watched: new Map(), // feed -> Watch
  pages: { team: null, run: null }, // the `next` of each list (null: no more)
  paginated: false,
  listTimer: null,
};

// -- signing in and out -------------------------------------------------------------------

function signIn(token) {
  token = token.trim();
  if (!token) return;
  if (app.client?.state === "unauthenticated") {
    // The token expired or was refused: go on with the new one, keeping what is watched.
    app.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("sign-in").hidden = true;
    app.client.setToken(token);
    return;
  }
  signOut({ keepToken: true });
  app.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
  const client = new GatewayClient({ url: base, token });
  app.client = client;
  client.addEventListener("state", (e) => {
    showConnection(e.detail);
    if (e.detail.state === "open") return;
    for (const w of app.watched.values()) if (w.status === "live") w.setStatus("waiting");
  });
  client.addEventListener("duplicate", () => showConnection());
  $("sign-in").hidden = true;
  $("feeds").hidden = false;
  $("sign-out").hidden = false;
  showConnection({ state: client.state });
  void loadFeeds();
  app.listTimer = setInterval(() => {
    if (!app.paginated) void loadFeeds();
  }, LIST_REFRESH_MS);
  for (const feed of new URLSearchParams(location.hash.slice(1)).getAll("watch")) watch(feed);
}

function signOut({ keepToken = false } = {}) {
  if (app.listTimer !== null) clearInterval(app.listTimer);
  app.listTimer = null;
  for (const feed of [...app.watched.keys()]) unwatch(feed);
  app.client?.close();
  app.client = null;
  if (!keepToken) {
    app.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("sign-in").hidden = false;
    $("feeds").hidden = true;
    $("sign-out").hidden = true;
    const badge = $("conn-state");
    badge.dataset.state = "idle";
    badge.textContent = "signed out";
    $("conn-detail").textContent = "";
  }
}

// -- the connection -----------------------------------------------------------------------

function showConnection(detail) {
  const client = app.client;
  if (!client) return;
  const state = detail?.state ?? client.state;
  const badge = $("conn-state");
  badge.dataset.state = state;
  const words = {
    idle: "not connected",
    connecting: "connecting",
    open: "connected",
    waiting: "reconnecting",
    unauthenticated: "token refused or expired",
    failed: "stopped (protocol error)",
    closed: "closed",
  };
  badge.textContent = words[state] ?? state;
  const stats = client.stats;
  const parts = [`reconnects: ${stats.reconnects}`];
  if (state === "waiting" && detail?.delayMs !== undefined) {
    const why = detail.code ? ` after close ${detail.code}` : "";
    parts.unshift(`next attempt in ${(detail.delayMs / 1000).toFixed(1)} s${why}`);
  }
  if (stats.duplicates > 0) parts.push(`duplicates dropped: ${stats.duplicates}`);
  $("conn-detail").textContent = parts.join(" · ");
  if (state === "unauthenticated") {
    const error = $("sign-in-error");
    error.textContent = "The gateway refused the token (expired?). Sign in again.";
    error.hidden = false;
    $("sign-in").hidden = false;
  }
}

// -- the feed list ------------------------------------------------------------------------

async function fetchFeeds(kind, after) {
  const url = new URL("v1/feeds", base);
  url.searchParams.set("kind", kind);
  url.searchParams.set("limit", String(PAGE_SIZE));
  if (after) url.searchParams.set("after", after);
  const response = await fetch(url, { headers: { Authorization: `Bearer ${app.token}` } });
  if (!response.ok) {
    const error = new Error(`GET /v1/feeds answered ${response.status}`);
    error.status = response.status;
    throw error;
  }
  const body = await response.json();
  return { feeds: Array.isArray(body.feeds) ? body.feeds : [], next: body.next ?? null };
}

async function loadFeeds(kind = null) {
  const status = $("feeds-status");
  const kinds = kind ? [kind] : ["team", "run"];
  try {
    for (const k of kinds) {
      const more = kind !== null;
      const page = await fetchFeeds(k, more ? app.pages[k] : null);
      if (!more) $(`list-${k}`).replaceChildren();
      for (const entry of page.feeds) $(`list-${k}`).append(feedRow(entry));
      app.pages[k] = page.next;
      $(`more-${k}`).hidden = page.next === null;
    }
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    status.textContent =
      err.status === 404
        ? "This gateway does not list feeds (GET /v1/feeds answered 404): watch one by name below."
        : err.status === 401 || err.status === 403
          ? "The token may not list feeds."
          : `Could not list feeds: ${err.message}`;
  }
}

function ago(ms) {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

function feedRow(entry) {
  const li = document.createElement("li");
  li.dataset.feed = entry.feed;
  const who = document.createElement("span");
  who.className = "who";
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = entry.feed.replace(/^(team|run)\//, "");
  name.title = entry.feed;
  const meta = document.createElement("span");
  meta.className = "meta";
  meta.textContent = `head ${entry.head}${typeof entry.updated_ms === "number" ? ` · ${ago(entry.updated_ms)}` : ""}`;
  who.append(name, meta);
  const button = document.createElement("button");
  button.type = "button";
  button.className = "watch";
  const watching = app.watched.has(entry.feed);
  button.textContent = watching ? "Watching" : "Watch";
  button.disabled = watching;
  button.addEventListener("click", () => watch(entry.feed));
  li.append(who, button);
  return li;
}

function markListed(feed, watching) {
  for (const li of document.querySelectorAll(".feed-list li")) {
    if (li.dataset.feed !== feed) continue;
    const button = li.querySelector("button");
    button.textContent = watching ? "Watching" : "Watch";
    button.disabled = watching;
  }
}

// -- watching a feed ----------------------------------------------------------------------

class Watch {
  constructor(feed) {
    this.feed = feed;
    this.kind = feedKind(feed);
    this.received = []; // {cursor, prelude, type, id} of every delivered event
    this.notes = [];
    this.count = 0;
    this.status = "waiting";
    this.view = this.kind === "run" ? newRunView() : null;
    this.dirty = false;
    const card = $("card-template").content.firstElementChild.cloneNode(true);
    card.dataset.feed = feed;
    card.querySelector(".kind").textContent = this.kind;
    card.querySelector(".feed-name").textContent = feed;
    card.querySelector(".unwatch").addEventListener("click", () => unwatch(feed));
    this.card = card;
    this.body = card.querySelector(".body");
    if (this.kind === "team") {
      this.list = document.createElement("ol");
      this.list.className = "items";
      this.body.append(this.list);
    }
    this.setStatus("waiting");
  }

  setStatus(status) {
    this.status = status;
    const dd = this.card.querySelector(".status");
    dd.textContent = status;
    dd.className = "status badge";
    dd.dataset.status = status;
  }

  note(text, kind = "info") {
    this.notes.push(text);
    const li = document.createElement("li");
    li.dataset.kind = kind;
    li.textContent = text;
    const notes = this.card.querySelector(".notes");
    notes.append(li);
    while (notes.children.length > 5) notes.firstElementChild.remove();
    if (this.notes.length > 100) this.notes.splice(0, this.notes.length - 100);
  }

  onEvent(ev) {
    const data = ev.data ?? {};
    const type = this.kind === "team" ? data.event?.type : data.type;
    const id = this.kind === "team" ? data.event?.event_id : undefined;
    this.received.push({ cursor: ev.cursor, prelude: ev.prelude, type, id });
    if (this.received.length > MAX_RECEIVED) this.received.splice(0, this.received.length - MAX_RECEIVED);
    if (!ev.prelude) this.count += 1;
    this.card.querySelector(".cursor").textContent = app.client.cursor(this.feed) ?? "–";
    this.card.querySelector(".count").textContent = String(this.count);
    if (this.kind === "team") this.appendTeamItem(ev, data);
    else {
      foldRun(this.view, data, ev.prelude);
      this.scheduleRender();
    }
  }

  appendTeamItem(ev, item) {
    const d = describeTeamItem(item);
    const li = document.createElement("li");
    li.className = "item";
    li.dataset.source = d.source.kind;
    li.dataset.cursor = ev.cursor;
    const head = document.createElement("div");
    head.className = "head";
    const source = document.createElement("span");
    source.className = "source";
    source.textContent = d.source.name ? `${d.source.kind}: ${d.source.name}` : d.source.kind;
    const type = document.createElement("span");
    type.className = "type";
    type.textContent = d.type;
    const cursor = document.createElement("span");
    cursor.className = "mono";
    cursor.textContent = ev.cursor;
    head.append(source, type, cursor);
    const text = document.createElement("div");
    text.className = "text";
    text.textContent = d.text;
    li.append(head, text);
    const stick = this.atBottom();
    this.list.append(li);
    while (this.list.children.length > MAX_ITEMS) this.list.firstElementChild.remove();
    if (stick) this.body.scrollTop = this.body.scrollHeight;
  }

  atBottom() {
    return this.body.scrollHeight - this.body.scrollTop - this.body.clientHeight < 40;
  }

  scheduleRender() {
    if (this.dirty) return;
    this.dirty = true;
    requestAnimationFrame(() => {
      this.dirty = false;
      this.renderRun();
    });
  }

  renderRun() {
    const view = this.view;
    const stick = this.atBottom();
    const nodes = [];
    const status = this.card.querySelector(".run-status");
    status.hidden = false;
    const badge = document.createElement("span");
    badge.className = "badge";
    badge.dataset.status = view.status;
    badge.textContent =
      view.status === "lost"
        ? "run ended by lease (producer lost)"
        : `run ${view.status === "unknown" ? "joined" : view.status}`;
    const parts = [badge];
    if (view.steps.length) {
      const steps = document.createElement("span");
      steps.className = "muted";
      steps.textContent = `step: ${view.steps.join(" › ")}`;
      parts.push(steps);
    }
    if (view.error) {
      const error = document.createElement("span");
      error.className = "error";
      error.textContent = `${view.error.code ? `${view.error.code}: ` : ""}${view.error.message}`;
      parts.push(error);
    }
    for (const text of view.notes.slice(-3)) {
      const n = document.createElement("span");
      n.className = "muted";
      n.textContent = text;
      parts.push(n);
    }
    status.replaceChildren(...parts);
    for (const m of view.messages) nodes.push(renderMessage(m));
    const state = document.createElement("details");
    state.className = "state";
    state.open = this.stateOpen ?? true;
    state.addEventListener("toggle", () => (this.stateOpen = state.open));
    const summary = document.createElement("summary");
    summary.textContent = "state";
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(view.state, null, 2);
    state.append(summary, pre);
    nodes.push(state);
    this.body.replaceChildren(...nodes);
    if (stick) this.body.scrollTop = this.body.scrollHeight;
  }
}

function prettyArgs(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text; // still streaming, or not JSON
  }
}

function renderMessage(m) {
  const div = document.createElement("div");
  div.className = "msg";
  div.dataset.role = m.role;
  div.dataset.streaming = String(m.streaming);
  const role = document.createElement("span");
  role.className = "role";
  role.textContent = m.role;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = m.content;
  div.append(role, text);
  for (const call of m.toolCalls) {
    const box = document.createElement("div");
    box.className = "call";
    box.dataset.call = call.id;
    const name = document.createElement("span");
    name.className = "call-name";
    name.textContent = `${call.name}(…)${call.done ? "" : " streaming"}`;
    const args = document.createElement("pre");
    args.className = "args";
    args.textContent = prettyArgs(call.args);
    box.append(name, args);
    if (call.result !== null) {
      const result = document.createElement("pre");
      result.className = "result";
      result.textContent = prettyArgs(call.result);
      box.append(result);
    }
    div.append(box);
  }
  return div;
}

function watch(feed) {
  feed = feed.trim();
  if (!app.client || app.watched.has(feed)) return;
  if (feedKind(feed) === null) {
    $("feeds-status").textContent = `Not a feed name: ${feed} (team/<id> or run/<thread>/<run>)`;
    return;
  }
  const w = new Watch(feed);
  app.watched.set(feed, w);
  $("cards").prepend(w.card);
  $("empty").hidden = true;
  markListed(feed, true);
  app.client.subscribe(feed, {
    after: null,
    onEvent: (ev) => w.onEvent(ev),
    onSubscribed: (d) => {
      w.setStatus("live");
      if (d.resumed) w.note(d.after ? `resumed from ${d.after}` : "resubscribed from the start");
    },
    onRestart: (d) => {
      w.setStatus("pending");
      // The run is told again from the new cursor (prelude or history): fold it afresh
      // rather than append its text a second time.
      if (w.view) w.view = newRunView();
      w.note(
        `epoch_restarted: resuming from ${d.cursor}` +
          (d.previous ? ` (was at ${d.previous}; items in between may be missing)` : ""),
        "error",
      );
      w.card.querySelector(".cursor").textContent = d.cursor;
    },
    onError: (d) => {
      w.setStatus(d.retrying ? "retrying" : "ended");
      w.note(`${d.code}: ${d.message}${d.retrying ? ` (retrying in ${(d.delayMs / 1000).toFixed(1)} s)` : ""}`, "error");
    },
  });
  w.setStatus("pending");
}

function unwatch(feed) {
  const w = app.watched.get(feed);
  if (!w) return;
  app.watched.delete(feed);
  app.client?.unsubscribe(feed);
  w.card.remove();
  markListed(feed, false);
  $("empty").hidden = app.watched.size > 0;
}

// -- wiring ---------------------------------------------------------------------------------

$("sign-in").addEventListener("submit", (e) => {
  e.preventDefault();
  $("sign-in-error").hidden = true;
  signIn($("token").value);
});
$("sign-out").addEventListener("click", () => signOut());
$("refresh").addEventListener("click", () => {
  app.paginated = false;
  void loadFeeds();
});
for (const kind of ["team", "run"]) {
  $(`more-${kind}`).addEventListener("click", () => {
    app.paginated = true;
    void loadFeeds(kind);
  });
}
$("watch-form").addEventListener("submit", (e) => {
  e.preventDefault();
  watch($("watch-name").value);
  $("watch-name").value = "";
});

window.gatewayConsole = {
  get client() {
    return app.client;
  },
  signIn,
  watch,
  unwatch,
  /** What each watched feed received: {feed: {status, cursor, count, received, notes}}. */
  snapshot() {
    const out = {};
    for (const [feed, w] of app.watched) {
      out[feed] = {
        status: w.status,
        cursor: app.client?.cursor(feed) ?? null,
        count: w.count,
        received: w.received,
        notes: w.notes,
        run: w.view ? { status: w.view.status, state: w.view.state, messages: w.view.messages.length } : null,
      };
    }
    return { state: app.client?.state ?? "signed out", stats: app.client?.stats ?? null, feeds: out };
  },
};

// Dev mode hands the token over in the fragment; take it out of the address bar (and so
// out of bookmarks, history and screenshots) and keep it for this tab only.
const given = fragment.get("token");
if (given) {
  fragment.delete("token");
  const rest = fragment.toString();
  history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
}
const token = given ?? sessionStorage.getItem(TOKEN_KEY);
if (token) {
  $("token").value = token;
  signIn(token);
}
