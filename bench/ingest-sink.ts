// The do-nothing subscriber of the ingest benchmark's baseline: the same subscription scheme as
// the service (the same SubscriberConnection code: MQTT 5, N connections in one shared
// subscription, fixed client ids, persistent sessions, the same Receive Maximum), acknowledging
// every message at once and storing nothing. What it receives per second is what the broker
// can deliver to the service at best.
//   node dist/bench/ingest-sink.js '{"url":"mqtt://127.0.0.1:1883","connections":8,...}'
import { ATTRS_FILTERS } from '../src/topics.js';
import { SubscriberConnection } from '../src/broker/subscriber.js';
import { subscriberClientId } from '../src/broker/external.js';
import { createLogger } from '../src/log.js';

export interface SinkConfig {
  url: string;
  clientId: string;
  connections: number;
  receiveMaximum: number;
}

export async function runSink(
  cfg: SinkConfig,
  report: (m: { type: 'progress'; received: number }) => void,
): Promise<{ stop(): Promise<void> }> {
  let received = 0;
  const log = createLogger('warn', { component: 'bench-sink' });
  const conns = Array.from(
    { length: cfg.connections },
    (_, i) =>
      new SubscriberConnection({
        url: cfg.url,
        clientId: subscriberClientId(cfg.clientId, i),
        version: 5,
        filters: ATTRS_FILTERS.map((f) => `$share/${cfg.clientId}/${f}`),
        sessionExpirySeconds: 60,
        receiveMaximum: cfg.receiveMaximum,
        log,
        onMessage(_topic, _payload, ack) {
          received++;
          ack.ack();
        },
      }),
  );
  await Promise.all(conns.map((c) => c.start()));
  const timer = setInterval(() => report({ type: 'progress', received }), 200);
  return {
    async stop() {
      clearInterval(timer);
      report({ type: 'progress', received });
      await Promise.all(conns.map((c) => c.close()));
    },
  };
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!) && process.argv[2]) {
  const cfg = JSON.parse(process.argv[2]) as SinkConfig;
  const send = (m: unknown) => {
    if (!process.send) console.log(JSON.stringify(m));
    else if (process.connected) process.send(m);
    else process.exit(0); // the parent is gone
  };
  const handle = await runSink(cfg, send);
  send({ type: 'ready' });
  process.on('message', (m: { type: string }) => {
    if (m.type === 'stop')
      void handle.stop().then(() => {
        send({ type: 'stopped' });
        setTimeout(() => process.exit(0), 100);
      });
  });
}
