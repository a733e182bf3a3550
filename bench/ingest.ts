// The ingest benchmark, in one run against the machine's Mosquitto and PostgreSQL
// (BENCH_MQTT_URL, default mqtt://127.0.0.1:1883; BENCH_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/postgres; a fresh database is created and dropped):
//   (a) the load generator (bench/ingest-load.ts) flat out into the do-nothing subscriber
//       (bench/ingest-sink.ts, the service's own subscription scheme): messages/s delivered;
//   (b) the same generator flat out into the service: messages/s and values/s committed;
//   (c) the generator at half of (a) with probe messages: publish-to-queryable latency (the
//       probe polls GET /history until its value is there);
//   (d) the service's resident memory with 100,000 devices in its caches.
//   npm run build && node dist/bench/ingest.js            (BENCH_DEVICES=10000 BENCH_SECONDS=15)
import { fork, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import mqtt from 'mqtt';
import pg from 'pg';
import { projectRoot } from '../src/paths.js';
import type { LoadConfig, LoadProgress } from './ingest-load.js';
import type { SinkConfig } from './ingest-sink.js';

const MQTT_URL = process.env.BENCH_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const ADMIN_DB = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const DEVICES = Number(process.env.BENCH_DEVICES ?? 10_000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 15);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 5);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 2);
const CACHE_DEVICES = Number(process.env.BENCH_CACHE_DEVICES ?? 100_000);
const CONNECTIONS = Number(process.env.BENCH_SUBSCRIBER_CONNECTIONS ?? 8);
const RECEIVE_MAXIMUM = 10_000;
/** Phases to run (default all): e.g. BENCH_PHASES=ab. */
const PHASES = process.env.BENCH_PHASES ?? 'abcd';
const tenant = 'bench';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

interface Child<P> {
  latest: P | undefined;
  ready: Promise<void>;
  stop(): Promise<P | undefined>;
}

function child<P>(file: string, cfg: unknown): Child<P> {
  const proc = fork(path.join(projectRoot, 'dist/bench', file), [JSON.stringify(cfg)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const c: Child<P> = {
    latest: undefined,
    ready: new Promise((resolve, reject) => {
      proc.on('message', (m: { type: string }) => {
        if (m.type === 'ready') resolve();
        if (m.type === 'progress') c.latest = m as P;
      });
      proc.once('exit', (code) => reject(new Error(`${file} exited with ${code}`)));
    }),
    stop: () =>
      new Promise((resolve) => {
        proc.on('message', (m: { type: string }) => {
          if (m.type === 'stopped') resolve(c.latest);
        });
        proc.once('exit', () => resolve(c.latest));
        proc.send({ type: 'stop' });
      }),
  };
  return c;
}

interface Service {
  proc: ChildProcess;
  base: string;
  token: string;
  metrics(): Promise<Record<string, number>>;
  rssMb(): number;
  stop(): Promise<void>;
}

async function startService(databaseUrl: string, env: Record<string, string> = {}): Promise<Service> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'dr-bench-ingest-'));
  const nodeArgs = process.env.BENCH_SERVICE_NODE_ARGS ? process.env.BENCH_SERVICE_NODE_ARGS.split(' ') : [];
  const proc = spawn(process.execPath, [...nodeArgs, path.join(projectRoot, 'dist/src/main.js')], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      MQTT_URL,
      MQTT_CLIENT_ID: `bench-svc-${crypto.randomBytes(3).toString('hex')}`,
      MQTT_SESSION_EXPIRY_SECONDS: '60',
      MQTT_SUBSCRIBER_CONNECTIONS: String(CONNECTIONS),
      PSK_ENCRYPTION_KEY: crypto.randomBytes(32).toString('hex'),
      ADMIN_PASSWORD: 'admin',
      DATA_DIR: dataDir,
      HOST: '127.0.0.1',
      PORT: '0',
      INTERNAL_PORT: '0',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  const base = await new Promise<string>((resolve, reject) => {
    let address: string | undefined;
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      for (const line of out.split('\n')) {
        if (line.includes('public HTTP API listening')) address = (JSON.parse(line) as { address: string }).address;
        if (line.includes('"msg":"ready"') && address) resolve(address);
        if (line.includes('"level":"warn"') || line.includes('"level":"error"')) process.stderr.write('  service: ' + line + '\n');
      }
      out = out.slice(out.lastIndexOf('\n') + 1);
    });
    proc.once('exit', (code) => reject(new Error(`service exited with ${code}`)));
  });
  const token = ((await (await fetch(`${base}/auth`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', passwd: 'admin' }) })).json()) as { jwt: string }).jwt;
  // A user of the bench tenant for history queries.
  await fetch(`${base}/auth/user`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ username: 'bench-user', passwd: 'bench-pass', service: tenant, profile: 'user' }),
  });
  const userToken = ((await (await fetch(`${base}/auth`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'bench-user', passwd: 'bench-pass' }) })).json()) as { jwt: string }).jwt;
  return {
    proc,
    base,
    token: userToken,
    async metrics() {
      const text = await (await fetch(`${base}/metrics`)).text();
      const m: Record<string, number> = {};
      for (const line of text.split('\n')) {
        if (line.startsWith('#') || !line) continue;
        const [name, value] = line.split(' ');
        const key = name!.replace(/\{shard="\d+"\}/, '');
        m[key] = (key !== name ? m[key] ?? 0 : 0) + Number(value);
      }
      return m;
    },
    rssMb() {
      const status = fs.readFileSync(`/proc/${proc.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
    },
    stop: () =>
      new Promise<void>((resolve) => {
        proc.once('exit', () => {
          fs.rmSync(dataDir, { recursive: true, force: true });
          resolve();
        });
        proc.kill('SIGTERM');
      }),
  };
}

function loadConfig(devices: string[], rate: number, devicesPerConnection = 1): LoadConfig {
  return { url: MQTT_URL, tenant, devices, devicesPerConnection, rate, window: WINDOW, connectConcurrency: 200 };
}

async function measure(read: () => Promise<number>, seconds: number): Promise<number> {
  const a = await read();
  const t0 = performance.now();
  await sleep(seconds * 1000);
  const b = await read();
  return (b - a) / ((performance.now() - t0) / 1000);
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main(): Promise<void> {
  const dbName = `dr_bench_${crypto.randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_DB });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${dbName}"`);
  const dbUrl = new URL(ADMIN_DB);
  dbUrl.pathname = '/' + dbName;
  const databaseUrl = dbUrl.toString();
  const results: Record<string, unknown> = {
    machine: `${os.cpus().length} cores (${os.cpus()[0]?.model}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}`,
    devices: DEVICES,
    window: WINDOW,
    seconds: SECONDS,
  };
  let service: Service | undefined;
  try {
    // Schema (the service migrates), then the fleet's devices.
    service = await startService(databaseUrl);
    const db = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    const { rows } = await db.query<{ id: string }>("INSERT INTO templates (tenant, label) VALUES ($1, 'bench') RETURNING id", [tenant]);
    const templateId = rows[0]!.id;
    for (const [label, vt] of [['temperature', 'float'], ['humidity', 'float'], ['pressure', 'float']]) {
      await db.query("INSERT INTO template_attrs (tenant, template_id, label, type, value_type) VALUES ($1, $2, $3, 'dynamic', $4)", [tenant, templateId, label, vt]);
    }
    const ids = Array.from({ length: Math.max(DEVICES, CACHE_DEVICES) + 1 }, (_, i) => i.toString(16).padStart(6, '0'));
    const probe = ids.pop()!;
    await db.query(`INSERT INTO devices (tenant, id, label) SELECT $1, i, 'dev' FROM unnest($2::text[]) i`, [tenant, [...ids, probe]]);
    await db.query(`INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, i, $3 FROM unnest($2::text[]) i`, [tenant, [...ids, probe], templateId]);
    const fleet = ids.slice(0, DEVICES);
    await service.stop();
    service = undefined;

    let sinkRate = Number(process.env.BENCH_BASELINE_RATE ?? 0);
    let gen: Child<LoadProgress>;
    if (PHASES.includes('a')) {
    // (a) baseline: the do-nothing subscriber.
    log(`(a) ${DEVICES} devices flat out into the do-nothing subscriber (${CONNECTIONS} connections, MQTT 5 shared subscription)`);
    const sink = child<{ received: number }>('ingest-sink.js', { url: MQTT_URL, clientId: `bench-sink-${crypto.randomBytes(3).toString('hex')}`, connections: CONNECTIONS, receiveMaximum: RECEIVE_MAXIMUM } satisfies SinkConfig);
    await sink.ready;
    gen = child<LoadProgress>('ingest-load.js', loadConfig(fleet, 0));
    await gen.ready;
    await sleep(WARMUP * 1000);
    const genA0 = gen.latest?.acked ?? 0;
    const t0 = performance.now();
    sinkRate = await measure(async () => sink.latest?.received ?? 0, SECONDS);
    const pubRateA = ((gen.latest?.acked ?? 0) - genA0) / ((performance.now() - t0) / 1000);
    await gen.stop();
    await sink.stop();
    results.a = { deliveredMsgsPerSec: Math.round(sinkRate), publishedMsgsPerSec: Math.round(pubRateA), connected: gen.latest?.connected };
    log(`    delivered ${Math.round(sinkRate)} msg/s (publisher acked ${Math.round(pubRateA)} msg/s)`);
    }

    service = await startService(databaseUrl);
    if (PHASES.includes('b')) {
    // (b) the service.
    log('(b) the same, into the service');
    gen = child<LoadProgress>('ingest-load.js', loadConfig(fleet, 0));
    await gen.ready;
    await sleep(WARMUP * 1000);
    const m0 = await service.metrics();
    const g0 = gen.latest?.acked ?? 0;
    const tb = performance.now();
    const rss: number[] = [];
    const rssTimer = setInterval(() => rss.push(service!.rssMb()), 1000);
    await sleep(SECONDS * 1000);
    clearInterval(rssTimer);
    const m1 = await service.metrics();
    const elapsed = (performance.now() - tb) / 1000;
    const pubRateB = ((gen.latest?.acked ?? 0) - g0) / elapsed;
    const final = await gen.stop();
    const msgsPerSec = (m1.ingest_messages_stored_total! - m0.ingest_messages_stored_total!) / elapsed;
    const valuesPerSec = (m1.ingest_values_stored_total! - m0.ingest_values_stored_total!) / elapsed;
    // Drain: everything the broker delivered gets committed.
    for (let i = 0; i < 120 && (await service.metrics()).ingest_queue_depth! > 0; i++) await sleep(500);
    const mEnd = await service.metrics();
    const batches = mEnd.ingest_batch_rows_count!;
    results.b = {
      committedMsgsPerSec: Math.round(msgsPerSec),
      committedValuesPerSec: Math.round(valuesPerSec),
      publishedMsgsPerSec: Math.round(pubRateB),
      ratioToBaseline: Number((msgsPerSec / sinkRate).toFixed(3)),
      meanRowsPerCopy: Math.round(mEnd.ingest_values_stored_total! / batches),
      meanCopySeconds: Number((mEnd.ingest_copy_duration_seconds_sum! / mEnd.ingest_copy_duration_seconds_count!).toFixed(4)),
      rssMbDuringIngest: rss.length ? Math.round(Math.max(...rss)) : undefined,
      publishedTotal: final?.acked,
      storedMessagesTotal: mEnd.ingest_messages_stored_total,
      receivedMessagesTotal: mEnd.ingest_messages_received_total,
      dropped: Object.fromEntries(Object.entries(mEnd).filter(([k, v]) => k.startsWith('ingest_dropped_total') && v > 0)),
    };
    log(`    committed ${Math.round(msgsPerSec)} msg/s, ${Math.round(valuesPerSec)} values/s (publisher acked ${Math.round(pubRateB)} msg/s); ratio ${(msgsPerSec / sinkRate).toFixed(3)}`);
    }

    if (PHASES.includes('c')) {
    // (c) latency at half the baseline rate.
    const half = Math.round(sinkRate / 2);
    log(`(c) ${half} msg/s (half of (a)) with probe messages: publish-to-queryable latency`);
    gen = child<LoadProgress>('ingest-load.js', loadConfig(fleet, half));
    await gen.ready;
    await sleep(WARMUP * 1000);
    const probeClient = await mqtt.connectAsync(MQTT_URL, { protocolVersion: 4, clientId: `bench-probe-${probe}`, username: `${tenant}:${probe}` });
    const latencies: number[] = [];
    const mc0 = await service.metrics();
    const tc = performance.now();
    let k = 0;
    while (performance.now() - tc < SECONDS * 1000) {
      const value = ++k + 0.5;
      const sent = performance.now();
      await probeClient.publishAsync(`${tenant}:${probe}/attrs`, JSON.stringify({ temperature: value }), { qos: 1 });
      for (;;) {
        const res = await fetch(`${service.base}/history/device/${probe}/history?lastN=1&attr=temperature`, { headers: { authorization: `Bearer ${service.token}` } });
        const body = (await res.json()) as Array<{ value: number }>;
        if (body[0]?.value === value) break;
        if (performance.now() - sent > 30_000) throw new Error('probe never became queryable');
        await sleep(2);
      }
      latencies.push(performance.now() - sent);
      await sleep(50);
    }
    const mc1 = await service.metrics();
    const achieved = (mc1.ingest_messages_stored_total! - mc0.ingest_messages_stored_total!) / ((performance.now() - tc) / 1000);
    await probeClient.endAsync();
    await gen.stop();
    latencies.sort((a, b) => a - b);
    results.c = {
      offeredMsgsPerSec: half,
      committedMsgsPerSec: Math.round(achieved),
      probes: latencies.length,
      p50Ms: Number(percentile(latencies, 50).toFixed(1)),
      p99Ms: Number(percentile(latencies, 99).toFixed(1)),
      maxMs: Number(latencies.at(-1)!.toFixed(1)),
    };
    log(`    p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms over ${latencies.length} probes (committed ${Math.round(achieved)} msg/s)`);
    }
    await service.stop();
    service = undefined;

    if (PHASES.includes('d')) {
    // (d) memory with CACHE_DEVICES devices cached.
    log(`(d) resident memory with ${CACHE_DEVICES} devices cached`);
    service = await startService(databaseUrl);
    await sleep(2000);
    const idle = service.rssMb();
    const all = ids.slice(0, CACHE_DEVICES);
    gen = child<LoadProgress>('ingest-load.js', { ...loadConfig(all, 20_000, 10), window: 1 });
    await gen.ready;
    for (let i = 0; i < 600; i++) {
      if ((await service.metrics()).ingest_cached_devices! >= CACHE_DEVICES) break;
      await sleep(500);
    }
    await gen.stop();
    const cached = (await service.metrics()).ingest_cached_devices!;
    await sleep(2000);
    const withCache = service.rssMb();
    results.d = { cachedDevices: cached, rssMbIdle: Math.round(idle), rssMbWithCache: Math.round(withCache) };
    log(`    ${cached} devices cached: RSS ${Math.round(withCache)} MB (idle after start: ${Math.round(idle)} MB)`);
    }
    await db.end();
  } finally {
    await service?.stop();
    await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
  console.log(JSON.stringify(results, null, 2));
}

await main();
