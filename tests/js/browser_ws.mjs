// Drive browser_ws.html in headless Chromium (playwright-core, the system /usr/bin/chromium).
//
// Usage: node browser_ws.mjs '<config JSON>'   or   echo '<config JSON>' | node browser_ws.mjs
//
// Config:
//   url         ws://host:port/v1/ws                    (required)
//   token       the JWT, sent as the "bearer.<JWT>" subprotocol by the page
//   feeds       ["team/<id>", ...] or [{"feed": ..., "after": "E:O"?}, ...]
//   events      how many event frames to wait for (total over all feeds)
//   timeout_ms  overall bound (default 20000): on expiry exit 2
//   chromium    executable (default /usr/bin/chromium, or $CHROMIUM)
//
// Output: JSON lines on stdout:
//   {"kind":"ready"}       the page got a `subscribed` (or `error`) frame for every feed
//   {"kind":"result",...}  last line: the frames window.received holds, the socket state,
//                          console messages and page errors
// Exit codes: 0 done, 2 timeout, 3 the socket closed early, 4 the browser failed, 5 bad config.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function readConfig() {
  if (process.argv[2]) return JSON.parse(process.argv[2]);
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

let config;
try {
  config = await readConfig();
  if (typeof config.url !== "string") throw new Error("url is required");
} catch (err) {
  emit({ kind: "result", ok: false, reason: "bad_config", message: String(err) });
  process.exit(5);
}

const timeoutMs = config.timeout_ms ?? 20000;
const wanted = config.events ?? 0;
const feeds = (config.feeds ?? []).map((f) => (typeof f === "string" ? { feed: f } : f));
const executablePath = config.chromium ?? process.env.CHROMIUM ?? "/usr/bin/chromium";
const deadline = Date.now() + timeoutMs;
const left = () => Math.max(1, deadline - Date.now());

const here = path.dirname(fileURLToPath(import.meta.url));
const pageUrl = pathToFileURL(path.join(here, "browser_ws.html"));
pageUrl.searchParams.set("url", config.url);
pageUrl.searchParams.set("token", config.token ?? "");
for (const f of feeds) {
  pageUrl.searchParams.append("feed", f.feed);
  if (f.after) pageUrl.searchParams.append("after", `${f.feed}=${f.after}`);
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gateway-chromium-"));
const consoleMessages = [];
const pageErrors = [];
let context = null;
let page = null;
let finished = false;

async function snapshot() {
  if (!page) return { received: [], gateway: null };
  try {
    return await page.evaluate(() => ({ received: window.received, gateway: window.gateway }));
  } catch (err) {
    return { received: [], gateway: null, evaluate_error: String(err) };
  }
}

async function finish(ok, reason, exitCode, extra = {}) {
  if (finished) return;
  finished = true;
  clearTimeout(hardTimer);
  const { received, gateway, evaluate_error } = await snapshot();
  emit({
    kind: "result",
    ok,
    reason,
    protocol: gateway?.protocol ?? null,
    gateway,
    frames: received ?? [],
    events: (received ?? []).filter((f) => f.type === "event"),
    console: consoleMessages,
    page_errors: pageErrors,
    evaluate_error,
    ...extra,
  });
  try {
    if (context) await context.close();
  } catch {}
  fs.rmSync(userDataDir, { recursive: true, force: true });
  process.stdout.write("", () => process.exit(exitCode));
}

// A hard bound in case the browser itself hangs: no snapshot, just report and leave.
const hardTimer = setTimeout(() => {
  if (finished) return;
  finished = true;
  emit({ kind: "result", ok: false, reason: "timeout", frames: [], events: [], hard: true });
  fs.rmSync(userDataDir, { recursive: true, force: true });
  process.exit(2);
}, timeoutMs + 5000);
hardTimer.unref();

try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    timeout: left(),
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
} catch (err) {
  emit({ kind: "result", ok: false, reason: "launch_failed", message: String(err) });
  fs.rmSync(userDataDir, { recursive: true, force: true });
  process.exit(4);
}

async function run() {
  page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (msg) => consoleMessages.push(`${msg.type()}: ${msg.text()}`));
  page.on("pageerror", (err) => pageErrors.push(String(err)));
  await page.goto(pageUrl.href, { timeout: left() });

  const names = [...new Set(feeds.map((f) => f.feed))];
  // Every feed answered (subscribed or error), or the socket closed.
  await page.waitForFunction(
    (names) =>
      window.gateway.close !== null ||
      names.every((n) =>
        window.received.some((f) => (f.type === "subscribed" || f.type === "error") && f.feed === n),
      ),
    names,
    { timeout: left(), polling: 20 },
  );
  if (await page.evaluate(() => window.gateway.close !== null)) {
    return finish(false, "closed_early", 3);
  }
  emit({ kind: "ready" });

  await page.waitForFunction(
    (n) =>
      window.gateway.close !== null ||
      window.received.filter((f) => f.type === "event").length >= n,
    wanted,
    { timeout: left(), polling: 20 },
  );
  const enough = await page.evaluate(
    (n) => window.received.filter((f) => f.type === "event").length >= n,
    wanted,
  );
  return enough ? finish(true, "done", 0) : finish(false, "closed_early", 3);
}

try {
  await run();
} catch (err) {
  const timedOut = err?.name === "TimeoutError" || /Timeout/.test(String(err));
  await finish(false, timedOut ? "timeout" : "browser_error", timedOut ? 2 : 4, {
    message: String(err),
  });
}
