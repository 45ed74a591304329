// Feeds A2UI v0.9 message streams to @a2ui/web_core's MessageProcessor (the reference
// renderer's data layer; no DOM, no network) and dumps the surfaces it holds.
// Every catalogId a stream's createSurface names is served by a catalogue of the basic
// components, so components are checked by their zod schemas as a renderer checks them.
// stdin: {"streams": {"<name>": [message, ...], ...}}
// stdout: {"<name>": {"surfaces": {"<surfaceId>": {"catalogId", "components":
//          {"<id>": {"id", "component", ...properties}}, "data"}}, "errors": [{"at", "error"}]}}
// A message the processor refuses (it throws) is recorded in "errors" with its index, and
// the stream goes on, as a renderer that reports a bad message and keeps rendering.
import { BASIC_COMPONENTS, Catalog, MessageProcessor } from "@a2ui/web_core/v0_9";

function surfacesOf(processor) {
  const out = {};
  for (const surface of processor.model.surfacesMap.values()) {
    const components = {};
    for (const c of surface.componentsModel.components.values()) {
      components[c.id] = { id: c.id, component: c.type, ...c.properties };
    }
    // JSON drops an undefined data model (the whole model removed), as the fold does.
    out[surface.id] = { catalogId: surface.catalog.id, components, data: surface.dataModel.get("/") };
  }
  return JSON.parse(JSON.stringify(out));
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { streams } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const out = {};
const realError = console.error;
for (const [name, messages] of Object.entries(streams)) {
  const ids = new Set(messages.filter((m) => m.createSurface).map((m) => m.createSurface.catalogId));
  const processor = new MessageProcessor([...ids].map((id) => new Catalog(id, BASIC_COMPONENTS)));
  console.error = () => {}; // the processor logs the validation failures it throws
  const errors = [];
  try {
    messages.forEach((message, at) => {
      try {
        processor.processMessage(message);
      } catch (err) {
        errors.push({ at, error: String(err && err.message ? err.message : err) });
      }
    });
  } finally {
    console.error = realError;
  }
  out[name] = { surfaces: surfacesOf(processor), errors };
}
process.stdout.write(JSON.stringify(out));
