// Socket.IO peer for bench/peers.py: reads Redis stream entries (XREAD BLOCK) and emits
// each to the room named after the stream key: io.to(key).emit('ev', data). Clients join
// with emit('subscribe', key). The Redis Streams adapter is installed as a multi-node
// deployment would have it. Environment: REDIS_URL, PORT (3000), FIELD (data).
const { Server } = require('socket.io');
const { createClient } = require('redis');
const { createAdapter } = require('@socket.io/redis-streams-adapter');

const PORT = +(process.env.PORT || 3000);
const URL = process.env.REDIS_URL;
if (!URL) throw new Error("REDIS_URL is required: the benchmark's own Redis");
const FIELD = process.env.FIELD || 'data';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const io = new Server({ transports: ['websocket'], serveClient: false });
  const adapterClient = createClient({ url: URL });
  await adapterClient.connect();
  io.adapter(createAdapter(adapterClient));
  const reader = createClient({ url: URL }); // the blocking XREAD connection
  const control = createClient({ url: URL }); // XREVRANGE while XREAD blocks
  await reader.connect();
  await control.connect();
  const ids = new Map(); // stream key -> last id read

  io.on('connection', (socket) => {
    socket.on('subscribe', async (key) => {
      if (!ids.has(key)) {
        ids.set(key, null);
        const last = await control.xRevRange(key, '+', '-', { COUNT: 1 });
        ids.set(key, last.length ? last[0].id : '0-0');
      }
      socket.join(key);
    });
  });
  io.listen(PORT);

  for (;;) {
    const streams = [...ids].filter(([, id]) => id).map(([key, id]) => ({ key, id }));
    if (!streams.length) { await sleep(50); continue; }
    const res = await reader.xRead(streams, { BLOCK: 200, COUNT: 1000 });
    for (const s of res || []) {
      for (const m of s.messages) io.to(s.name).emit('ev', m.message[FIELD]);
      ids.set(s.name, s.messages[s.messages.length - 1].id);
    }
  }
}
main();
