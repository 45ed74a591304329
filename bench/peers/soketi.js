// soketi peer for bench/peers.py: a Pusher-protocol server on 127.0.0.1:PORT (6001) with
// one app (app-id / app-key / app-secret); bench/soketi_pub.py publishes through its
// signed HTTP API.
const defaults = {
  SOKETI_HOST: '127.0.0.1',
  SOKETI_PORT: process.env.PORT || '6001',
  SOKETI_METRICS_HOST: '127.0.0.1',
  SOKETI_DEFAULT_APP_ID: 'app-id',
  SOKETI_DEFAULT_APP_KEY: 'app-key',
  SOKETI_DEFAULT_APP_SECRET: 'app-secret',
};
for (const [name, value] of Object.entries(defaults)) process.env[name] ??= value;
process.argv = [process.argv[0], 'soketi', 'start'];
require('@soketi/soketi/bin/server.js');
