// The benchmarks' MQTT load generator (bench/ingest-load.ts): two runs against one broker with
// the same devices (two benchmarks on the machine's Mosquitto, e.g. bench/history-scale.js and
// bench/history-readers.js, both tenant `bench`, devices 000000..) must not take over each
// other's connections: each keeps being acknowledged. With client ids named after the device
// alone, the second run's CONNECTs closed the first run's connections for good, and the first
// benchmark reported 0 acknowledged messages a second.
import crypto from 'node:crypto';
import { afterAll, expect, inject, it } from 'vitest';
import { runLoad, type LoadProgress } from '../../bench/ingest-load.js';

const stops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const stop of stops) await stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it('two load generators with the same devices on one broker are both acknowledged', async () => {
  const tenant = `gen${crypto.randomBytes(3).toString('hex')}`;
  const cfg = {
    url: inject('mqttUrl'),
    tenant,
    devices: { from: 0, count: 3 },
    devicesPerConnection: 1,
    rate: 30,
    window: 2,
    connectConcurrency: 3,
  };
  const latest: LoadProgress[] = [];
  for (const run of [0, 1]) {
    const handle = await runLoad({ ...cfg }, (p) => (latest[run] = p));
    stops.push(() => handle.stop());
  }
  await sleep(500);
  const before = latest.map((p) => p.acked);
  await sleep(2000);
  // Both runs still connected, both still acknowledged (30 msg/s each: ~60 in 2 s).
  expect(latest.map((p) => p.connected)).toEqual([3, 3]);
  expect(latest[0]!.acked - before[0]!).toBeGreaterThan(10);
  expect(latest[1]!.acked - before[1]!).toBeGreaterThan(10);
});
