// The live stream's cost and latency (docs/live.md §6):
//   node dist/bench/live.js   (LIVE_BENCH_SECONDS=10, LIVE_BENCH_ROUNDS=2, LIVE_BENCH_IDLE=10000, LIVE_BENCH_FIXED_RATE=10000)
// One service process (embedded PostgreSQL and broker, bench/lib/harness.ts), 1,000 devices,
// the load generator of the ingest benchmark (bench/ingest-load.ts, flat out, QoS 1) as its own
// process:
//   (a) ingest rate without stream clients, (b) the same with 100 WebSocket clients each
//       subscribed to 10 of the 1,000 devices (1 % of the traffic): alternated for ROUNDS rounds;
//       the figure is the ratio b/a of acknowledged messages per second; then the same two at
//       LIVE_BENCH_FIXED_RATE (10,000 msg/s, the rate; 0: skipped): rate and the
//       service's CPU µs per message (every thread of its process, not PostgreSQL's);
//   (c) publish -> client latency: the load at half of (a)'s rate, one more device publishing its
//       send time (ms) as a value every 20 ms, a client subscribed to it measures arrival - send;
//   (d) first, the service's resident memory before and after 10,000 idle WebSocket clients connect.
import fs from 'node:fs';
import mqtt from 'mqtt';
import WebSocket from 'ws';
import { startBenchService, type BenchService } from './lib/harness.js';
import { generator } from './lib/load-generator.js';

const SECONDS = Number(process.env.LIVE_BENCH_SECONDS ?? 10);
const ROUNDS = Number(process.env.LIVE_BENCH_ROUNDS ?? 2);
const IDLE = Number(process.env.LIVE_BENCH_IDLE ?? 10_000);
const FIXED_RATE = Number(process.env.LIVE_BENCH_FIXED_RATE ?? 10_000);
const DEVICES = 1000;
const CLIENTS = 100;
const TENANT = 'admin';
const log = (msg: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const hex = (i: number) => i.toString(16).padStart(6, '0');

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** The load generator as a child process; resolves once its devices are connected. */
function startLoad(svc: BenchService, rate: number) {
  const gen = generator({
    url: svc.mqttUrl!,
    tenant: TENANT,
    devices: { from: 0, count: DEVICES },
    devicesPerConnection: 1,
    rate,
    window: 8,
    connectConcurrency: 50,
  });
  return { ready: gen.ready, acked: () => gen.latest()?.acked ?? 0, stop: gen.stop };
}

/** CPU seconds (user + system, every thread) the process has used so far. */
function cpuSeconds(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

/** Acknowledged messages per second over SECONDS after 2 s of warm-up (rate 0: flat out), and the service's CPU µs a message. */
async function measureRate(svc: BenchService, rate = 0): Promise<{ rate: number; cpuUsPerMsg: number }> {
  const load = startLoad(svc, rate);
  await load.ready;
  await sleep(2000);
  const from = load.acked();
  const cpu0 = cpuSeconds(svc.pid);
  const t0 = performance.now();
  await sleep(SECONDS * 1000);
  const acked = load.acked() - from;
  const cpu = cpuSeconds(svc.pid) - cpu0;
  const measured = (acked * 1000) / (performance.now() - t0);
  await load.stop();
  await sleep(1000); // the backlog settles
  return { rate: measured, cpuUsPerMsg: Number(((cpu * 1e6) / acked).toFixed(1)) };
}

function openClient(svc: BenchService, query: string, onMessage?: (text: string) => void): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${svc.base.replace('http', 'ws')}/stream${query}`, { headers: { Authorization: `Bearer ${svc.token}` } });
    ws.on('open', () => resolve(ws));
    ws.on('error', reject);
    if (onMessage) ws.on('message', (d: Buffer) => onMessage(d.toString('utf8')));
  });
}

async function main(): Promise<void> {
  const svc = await startBenchService({ MQTT_DEVICE_AUTH: 'off', LIVE_CLIENT_BUFFER_BYTES: String(1 << 20) });
  try {
    const t = await fetch(`${svc.base}/template`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${svc.token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({
        label: 'weather',
        attrs: ['temperature', 'humidity', 'pressure', 'sent'].map((label) => ({ label, type: 'dynamic', value_type: 'float' })),
      }),
    });
    const templateId = ((await t.json()) as { template: { id: number } }).template.id;
    // DEVICES for the load, one more (the probe) for the latency.
    await svc.pool.query(
      `INSERT INTO devices (tenant, id, label) SELECT $1, lpad(to_hex(i), 6, '0'), 'dev' FROM generate_series(0, $2) i`,
      [TENANT, DEVICES],
    );
    await svc.pool.query(
      `INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, lpad(to_hex(i), 6, '0'), $3 FROM generate_series(0, $2) i`,
      [TENANT, DEVICES, templateId],
    );

    // (d) idle clients, first: on a service that has not carried any load yet.
    await sleep(3000);
    const before = rssMb(svc.pid);
    const idle: WebSocket[] = [];
    for (let i = 0; i < IDLE; i += 500) {
      idle.push(...(await Promise.all(Array.from({ length: Math.min(500, IDLE - i) }, () => openClient(svc, '')))));
    }
    await sleep(3000);
    const after = rssMb(svc.pid);
    for (const c of idle) c.terminate();

    // (a) / (b), alternated: flat out, and at FIXED_RATE (the 10,000 msg/s), where the
    // clients' cost shows as the service's CPU per message rather than as a lower rate.
    const without: number[] = [];
    const withClients: number[] = [];
    const fixed: Array<{ without: { rate: number; cpuUsPerMsg: number }; with: { rate: number; cpuUsPerMsg: number } }> = [];
    let received = 0;
    const clientsOpen = async <T>(run: () => Promise<T>): Promise<T> => {
      const clients: WebSocket[] = [];
      for (let c = 0; c < CLIENTS; c++) {
        const ids = Array.from({ length: DEVICES / CLIENTS }, (_, k) => hex(c * (DEVICES / CLIENTS) + k));
        clients.push(await openClient(svc, `?device=${ids.join(',')}`, () => received++));
      }
      try {
        return await run();
      } finally {
        for (const c of clients) c.close();
        await sleep(500);
      }
    };
    for (let round = 0; round < ROUNDS; round++) {
      without.push((await measureRate(svc)).rate);
      log(`round ${round + 1}: no clients ${without.at(-1)!.toFixed(0)} msg/s`);
      withClients.push((await clientsOpen(() => measureRate(svc))).rate);
      log(`round ${round + 1}: ${CLIENTS} clients ${withClients.at(-1)!.toFixed(0)} msg/s (client messages so far ${received})`);
      if (FIXED_RATE > 0) {
        const a = await measureRate(svc, FIXED_RATE);
        const b = await clientsOpen(() => measureRate(svc, FIXED_RATE));
        fixed.push({ without: a, with: b });
        log(`round ${round + 1} at ${FIXED_RATE} msg/s: ${JSON.stringify(fixed.at(-1))}`);
      }
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const top = mean(without);

    // (c) latency at half the rate.
    const load = startLoad(svc, Math.round(top / 2));
    await load.ready;
    await sleep(2000);
    const latencies: number[] = [];
    const probe = hex(DEVICES);
    const client = await openClient(svc, `?device=${probe}`, (text) => {
      const m = JSON.parse(text) as { type: string; attrs?: { sent?: number } };
      if (m.type === 'attrs' && m.attrs?.sent !== undefined) latencies.push(Date.now() - m.attrs.sent);
    });
    const publisher = await mqtt.connectAsync(svc.mqttUrl!, { username: `${TENANT}:${probe}`, reconnectPeriod: 0 });
    const until = Date.now() + SECONDS * 1000;
    while (Date.now() < until) {
      publisher.publish(`${TENANT}:${probe}/attrs`, JSON.stringify({ sent: Date.now() }), { qos: 1 });
      await sleep(20);
    }
    await sleep(2000);
    await publisher.endAsync();
    client.close();
    const loadRate = ((): number => load.acked())();
    await load.stop();
    latencies.sort((x, y) => x - y);
    const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;

    const result = {
      ingest_no_clients_msg_s: Math.round(top),
      ingest_100_clients_msg_s: Math.round(mean(withClients)),
      ratio: Number((mean(withClients) / top).toFixed(3)),
      rounds: { without: without.map(Math.round), with: withClients.map(Math.round) },
      at_fixed_rate: {
        offered: FIXED_RATE,
        rounds: fixed.map((f) => ({
          without: { msg_s: Math.round(f.without.rate), service_cpu_us_per_msg: f.without.cpuUsPerMsg },
          with: { msg_s: Math.round(f.with.rate), service_cpu_us_per_msg: f.with.cpuUsPerMsg },
        })),
      },
      latency_at_half_rate_ms: { rate: Math.round(top / 2), samples: latencies.length, p50: pct(50), p99: pct(99), max: latencies.at(-1) },
      load_messages_during_latency: loadRate,
      idle_clients: IDLE,
      rss_mb: {
        before: Math.round(before),
        after: Math.round(after),
        per_1000_clients: Number((((after - before) / IDLE) * 1000).toFixed(1)),
      },
    };
    console.log(JSON.stringify(result, null, 2));
  } finally {
    await svc.stop();
  }
}

await main();
