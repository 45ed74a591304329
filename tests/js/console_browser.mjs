// Drive a page in headless Chromium (playwright-core, the system /usr/bin/chromium) by
// commands, for tests/test_console_browser.py.
//
// Usage: node console_browser.mjs, then JSON lines on stdin:
//   first line, the config: {"chromium"?, "timeout_ms"?, "width"?, "height"?}
//   then commands, each answered by {"kind": "reply", "id", "ok", "value"|"error"}:
//     {"id", "cmd": "goto", "url"}
//     {"id", "cmd": "eval", "expr", "arg"?}          the value of a JS expression; with
//                                                    "arg", of the function it names
//                                                    called with arg
//     {"id", "cmd": "waitFor", "expr", "arg"?, "timeout_ms"} until that is truthy
//     {"id", "cmd": "click", "selector"}             {"id", "cmd": "fill", "selector", "value"}
//     {"id", "cmd": "screenshot", "path", "fullPage"?}
//     {"id", "cmd": "viewport", "width", "height"}   {"id", "cmd": "colorScheme", "value"}
//     {"id", "cmd": "close"}                         (then exit 0)
// Also, as they happen: {"kind": "pageerror", "message"} and
// {"kind": "console", "type", "text", "url"} for every console message of the page.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { chromium } from "playwright-core";

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const iterator = lines[Symbol.asyncIterator]();
const config = JSON.parse((await iterator.next()).value);
const timeoutMs = config.timeout_ms ?? 60000;

const hardTimer = setTimeout(() => {
  emit({ kind: "fatal", reason: "timeout" });
  process.exit(2);
}, timeoutMs);

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gateway-console-"));
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: config.chromium ?? "/usr/bin/chromium",
    headless: true,
    viewport: { width: config.width ?? 1280, height: config.height ?? 900 },
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
  emit({ kind: "fatal", reason: "launch_failed", message: String(err) });
  fs.rmSync(userDataDir, { recursive: true, force: true });
  process.exit(4);
}
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(timeoutMs);
page.on("console", (msg) =>
  emit({ kind: "console", type: msg.type(), text: msg.text(), url: msg.location()?.url ?? null }),
);
page.on("pageerror", (err) => emit({ kind: "pageerror", message: String(err?.stack ?? err) }));

/** The expression, or with an argument the call of the function it is. */
function expression(command) {
  return "arg" in command ? `(${command.expr})(${JSON.stringify(command.arg)})` : command.expr;
}

async function run(command) {
  switch (command.cmd) {
    case "goto":
      await page.goto(command.url);
      return null;
    case "eval":
      return await page.evaluate(expression(command));
    case "waitFor": {
      // Polled from here with page.evaluate: waitForFunction evaluates strings inside
      // the page, which the console's Content-Security-Policy (no 'unsafe-eval') refuses.
      const waitMs = command.timeout_ms ?? 20000;
      const deadline = Date.now() + waitMs;
      const expr = expression(command);
      for (;;) {
        if (await page.evaluate(expr)) return null;
        if (Date.now() > deadline) {
          throw new Error(`waitFor: not true within ${waitMs} ms: ${command.expr.slice(0, 200)}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    case "click":
      await page.click(command.selector);
      return null;
    case "fill":
      await page.fill(command.selector, command.value);
      return null;
    case "screenshot":
      await page.screenshot({ path: command.path, fullPage: command.fullPage ?? false });
      return command.path;
    case "viewport":
      await page.setViewportSize({ width: command.width, height: command.height });
      return null;
    case "colorScheme":
      await page.emulateMedia({ colorScheme: command.value });
      return null;
    default:
      throw new Error(`unknown command ${command.cmd}`);
  }
}

for (;;) {
  const { value, done } = await iterator.next();
  if (done) break;
  if (!value.trim()) continue;
  const command = JSON.parse(value);
  if (command.cmd === "close") {
    emit({ kind: "reply", id: command.id, ok: true, value: null });
    break;
  }
  try {
    emit({ kind: "reply", id: command.id, ok: true, value: (await run(command)) ?? null });
  } catch (err) {
    emit({ kind: "reply", id: command.id, ok: false, error: String(err?.message ?? err) });
  }
}
clearTimeout(hardTimer);
try {
  await context.close();
} catch {}
fs.rmSync(userDataDir, { recursive: true, force: true });
process.stdout.write("", () => process.exit(0));
