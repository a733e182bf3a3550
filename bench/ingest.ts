// The ingest benchmark, in one run against the machine's Mosquitto and PostgreSQL
// (BENCH_MQTT_URL, default mqtt://127.0.0.1:1883; BENCH_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/postgres; a fresh database is created and dropped).
//
// Throughput is the highest *sustainable* rate: the load generator (bench/ingest-load.ts,
// BENCH_DEVICES devices, QoS 1, 3 values a message) offers a fixed rate (BENCH_START_RATE, 5000;
// lowered by 20 % a step first while it is too much), raised by 20 % a step
// until the receiver no longer keeps up (it gets less than 97 % of what was published) or the
// publishers cannot reach it (less than 90 % of the offered rate), twice in a row; then the gap
// between the last rate that held and the first that failed is halved BENCH_REFINE_STEPS (2)
// times. After a failed step the publishers pause until the receiver has taken the broker's
// backlog, so each step starts level. The result is the most the receiver took in a step where
// it kept up. Flat-out publishing is not a measure of anything with Mosquitto:
// it acknowledges publishers at full speed while starving its subscribers, and drops what
// does not fit its queues (measured: 10,000 devices flat out, ~65k msg/s accepted, ~70 msg/s
// delivered to 8 shared-subscription connections).
//   (a) into the do-nothing subscriber (bench/ingest-sink.ts, the service's own subscription
//       scheme): messages/s the broker delivers;
//   (b) into the service: messages/s and values/s committed to history;
//   (c) at half of (a), with probe messages: publish-to-queryable latency (the probe publishes
//       and polls GET /history until its value is there);
//   (e) CPU microseconds per message at a fixed rate (BENCH_COST_RATE, 8000 msg/s): of the
//       generator, the broker and the do-nothing subscriber (what (a) spends), then of the
//       generator, the broker, the service and PostgreSQL (what (b) spends);
//   (d) the service's resident memory with BENCH_CACHE_DEVICES (100,000) devices cached, beside
//       the same number of messages from 1,000 devices.
// (a) and (b) alternate for BENCH_ROUNDS (2) rounds, each ratio from one pair: the machine is
// shared, and what others run moves every figure.
//   npm run build && node dist/bench/ingest.js      (BENCH_PHASES=abcd, BENCH_DEVICES=10000)
import { fork, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import mqtt from 'mqtt';
import pg from 'pg';
import { projectRoot } from '../src/paths.js';
import { subscriberClientId } from '../src/broker/external.js';
import { benchServiceEnv, benchUserToken, readyAddress } from './lib/harness.js';
import type { LoadConfig, LoadProgress } from './ingest-load.js';
import type { SinkConfig } from './ingest-sink.js';

const MQTT_URL = process.env.BENCH_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const ADMIN_DB = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const DEVICES = Number(process.env.BENCH_DEVICES ?? 10_000);
const STEP_SECONDS = Number(process.env.BENCH_STEP_SECONDS ?? 6);
const SETTLE_SECONDS = Number(process.env.BENCH_SETTLE_SECONDS ?? 3);
const START_RATE = Number(process.env.BENCH_START_RATE ?? 5000);
const LATENCY_SECONDS = Number(process.env.BENCH_LATENCY_SECONDS ?? 20);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 4);
const CACHE_DEVICES = Number(process.env.BENCH_CACHE_DEVICES ?? 100_000);
const CONNECTIONS = Number(process.env.BENCH_SUBSCRIBER_CONNECTIONS ?? 8);
const PHASES = process.env.BENCH_PHASES ?? 'abcde';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const REFINE_STEPS = Number(process.env.BENCH_REFINE_STEPS ?? 2);
const RECEIVE_MAXIMUM = 10_000;
const KEEP_UP = 0.97;
const tenant = 'bench';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

interface Child<P> {
  pid: number;
  latest: P | undefined;
  ready: Promise<void>;
  send(m: unknown): void;
  /** A function field, not a method: startSink wraps it. */
  stop: () => Promise<P | undefined>;
}

function child<P>(file: string, cfg: unknown): Child<P> {
  const proc = fork(path.join(projectRoot, 'dist/bench', file), [JSON.stringify(cfg)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const c: Child<P> = {
    pid: proc.pid!,
    latest: undefined,
    ready: new Promise((resolve, reject) => {
      proc.on('message', (m: { type: string }) => {
        if (m.type === 'ready') resolve();
        if (m.type === 'progress') c.latest = m as P;
      });
      proc.once('exit', (code) => reject(new Error(`${file} exited with ${code}`)));
    }),
    send: (m) => proc.send(m as object),
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

/**
 * Ends the broker sessions of a stopped receiver's subscriber connections. Their sessions are persistent (as the
 * service's must be), so Mosquitto would go on routing every message to their share group and
 * queueing or dropping it for them until the expiry: work that would be charged to the next
 * phase. A clean start discards a session; expiry 0 keeps the new one from outliving it.
 */
async function forgetSessions(base: string): Promise<void> {
  for (let n = 0; n < CONNECTIONS; n++) {
    const clientId = subscriberClientId(base, n);
    const c = await mqtt.connectAsync(MQTT_URL, {
      clientId,
      clean: true,
      protocolVersion: 5,
      properties: { sessionExpiryInterval: 0 },
      reconnectPeriod: 0,
    });
    await c.endAsync();
  }
}

/** The do-nothing subscriber (bench/ingest-sink.ts) in its own process; stop() also ends its sessions. */
function startSink(): Child<{ received: number }> {
  const clientId = `bench-sink-${crypto.randomBytes(3).toString('hex')}`;
  const sink = child<{ received: number }>('ingest-sink.js', {
    url: MQTT_URL,
    clientId,
    connections: CONNECTIONS,
    receiveMaximum: RECEIVE_MAXIMUM,
  } satisfies SinkConfig);
  const stop = sink.stop;
  sink.stop = async () => {
    const last = await stop();
    await forgetSessions(clientId);
    return last;
  };
  return sink;
}

interface Service {
  proc: ChildProcess;
  base: string;
  token: string;
  metrics(): Promise<Record<string, number>>;
  rssMb(): number;
  stop(): Promise<void>;
}

async function startService(databaseUrl: string): Promise<Service> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'dr-bench-ingest-'));
  const clientId = `bench-svc-${crypto.randomBytes(3).toString('hex')}`;
  const nodeArgs = process.env.BENCH_SERVICE_NODE_ARGS ? process.env.BENCH_SERVICE_NODE_ARGS.split(' ') : [];
  const proc = spawn(process.execPath, [...nodeArgs, path.join(projectRoot, 'dist/src/main.js')], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      MQTT_URL,
      MQTT_CLIENT_ID: clientId,
      // A group of its own: the machine's broker may serve other services in the default group.
      MQTT_SHARE_GROUP: clientId,
      MQTT_SESSION_EXPIRY_SECONDS: '60',
      MQTT_SUBSCRIBER_CONNECTIONS: String(CONNECTIONS),
      PSK_ENCRYPTION_KEY: crypto.randomBytes(32).toString('hex'),
      ADMIN_PASSWORD: 'admin',
      DATA_DIR: dataDir,
      HOST: '127.0.0.1',
      PORT: '0',
      INTERNAL_PORT: '0',
      LOG_LEVEL: 'info',
      ...benchServiceEnv(),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const base = await readyAddress(proc);
  const token = await benchUserToken(base, tenant);
  return {
    proc,
    base,
    token,
    async metrics() {
      const text = await (await fetch(`${base}/metrics`)).text();
      const m: Record<string, number> = {};
      for (const line of text.split('\n')) {
        if (line.startsWith('#') || !line) continue;
        const [name, value] = line.split(' ');
        const key = name!.replace(/\{shard="\d+"\}/, '');
        m[key] = (key !== name ? (m[key] ?? 0) : 0) + Number(value);
      }
      return m;
    },
    rssMb() {
      const status = fs.readFileSync(`/proc/${proc.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
    },
    stop: async () => {
      // (a service that died meanwhile has no exit left to wait for)
      if (proc.exitCode === null && proc.signalCode === null) {
        await new Promise<void>((resolve) => {
          proc.once('exit', () => resolve());
          proc.kill('SIGTERM');
        });
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
      await forgetSessions(clientId); // (its actuation connection starts clean and keeps no session)
    },
  };
}

function loadConfig(count: number, rate: number, devicesPerConnection = 1): LoadConfig {
  return { url: MQTT_URL, tenant, devices: { from: 0, count }, devicesPerConnection, rate, window: WINDOW, connectConcurrency: 200 };
}

interface Step {
  offered: number;
  published: number;
  received: number;
}

/**
 * Raises the rate by 20 % a step until the receiver falls behind; returns every step. A step
 * that fails is tried once more (this machine is shared: one noisy step must not end the search).
 */
async function sustainable(gen: Child<LoadProgress>, received: () => Promise<number>, label: string): Promise<Step[]> {
  const steps: Step[] = [];
  const trial = async (rate: number): Promise<boolean> => {
    gen.send({ type: 'rate', rate });
    await sleep(SETTLE_SECONDS * 1000);
    const r0 = await received();
    const p0 = gen.latest?.acked ?? 0;
    const t0 = performance.now();
    await sleep(STEP_SECONDS * 1000);
    const secs = (performance.now() - t0) / 1000;
    const step = {
      offered: rate,
      published: Math.round(((gen.latest?.acked ?? 0) - p0) / secs),
      received: Math.round(((await received()) - r0) / secs),
    };
    steps.push(step);
    log(`    ${label}: offered ${step.offered} msg/s, published ${step.published}, received ${step.received}`);
    // The receiver fell behind, or the publishers (or the broker's intake) cannot go faster.
    const held = !(step.received < KEEP_UP * step.published || step.published < 0.9 * rate);
    if (!held) await drain();
    return held;
  };
  // After a failed step the broker holds a backlog for the receiver, which would fail the next
  // step whatever its rate: the publishers (nearly) stop until the receiver stops receiving,
  // so every step starts level. Same for (a) and (b).
  const drain = async () => {
    gen.send({ type: 'rate', rate: 1 });
    let last = await received();
    for (let i = 0; i < 120; i++) {
      await sleep(500);
      const now = await received();
      if (now - last <= 5) break;
      last = now;
    }
  };
  // A rate counts as failed only when it fails twice.
  const holds = async (rate: number): Promise<boolean> => (await trial(rate)) || trial(rate);
  // Up by 20 % a step until a rate fails; then halve the gap between the last rate that held
  // and the first that failed, twice (the result is then within 5 % of the true limit).
  // A start rate the receiver does not take: down by 20 % a step until one holds (as
  // bench/soak.ts does), or the search would end with no step that held and report 0.
  let good = 0;
  let bad = 0;
  let rate = START_RATE;
  while (rate >= 100 && !(await holds(rate))) {
    bad = rate;
    rate = Math.round(rate * 0.8);
  }
  if (rate >= 100) good = rate;
  if (good > 0 && bad === 0) {
    rate = Math.round(good * 1.2);
    while (rate < 1_000_000 && (await holds(rate))) {
      good = rate;
      rate = Math.round(rate * 1.2);
    }
    bad = rate;
  }
  for (let i = 0; i < REFINE_STEPS && good > 0; i++) {
    const mid = Math.round((good + bad) / 2);
    if (await holds(mid)) good = mid;
    else bad = mid;
  }
  return steps;
}

/** The best step where the receiver kept up with what was published. */
function best(steps: Step[]): Step {
  const ok = steps.filter((s) => s.received >= KEEP_UP * s.published);
  return ok.sort((a, b) => b.received - a.received)[0] ?? { offered: 0, published: 0, received: 0 };
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
    machine: `${os.cpus().length} cores (${os.cpus()[0]?.model}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load average at start ${os.loadavg()[0]!.toFixed(1)}`,
    devices: DEVICES,
    windowPerDevice: WINDOW,
    subscriberConnections: CONNECTIONS,
  };
  let service: Service | undefined;
  try {
    // The schema (the service migrates), then the devices: ids 000000.. as the generator uses.
    service = await startService(databaseUrl);
    const db = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    const { rows } = await db.query<{ id: string }>("INSERT INTO templates (tenant, label) VALUES ($1, 'bench') RETURNING id", [tenant]);
    const templateId = rows[0]!.id;
    for (const label of ['temperature', 'humidity', 'pressure']) {
      await db.query("INSERT INTO template_attrs (tenant, template_id, label, type, value_type) VALUES ($1, $2, $3, 'dynamic', 'float')", [
        tenant,
        templateId,
        label,
      ]);
    }
    const total = Math.max(DEVICES, CACHE_DEVICES) + 1;
    await db.query(`INSERT INTO devices (tenant, id, label) SELECT $1, lpad(to_hex(i), 6, '0'), 'dev' FROM generate_series(0, $2 - 1) i`, [
      tenant,
      total,
    ]);
    await db.query(
      `INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, lpad(to_hex(i), 6, '0'), $3 FROM generate_series(0, $2 - 1) i`,
      [tenant, total, templateId],
    );
    const probe = (total - 1).toString(16).padStart(6, '0');
    await service.stop();
    service = undefined;

    // (a) and (b) alternate for BENCH_ROUNDS rounds: the machine is shared, so each ratio is
    // taken from a pair measured minutes apart, not from a baseline of another hour.
    const baselineRun = async () => {
      log(`(a) ${DEVICES} devices into the do-nothing subscriber (${CONNECTIONS} connections, MQTT 5 shared subscription)`);
      const sink = startSink();
      await sink.ready;
      const gen = child<LoadProgress>('ingest-load.js', loadConfig(DEVICES, START_RATE));
      await gen.ready;
      const steps = await sustainable(gen, () => Promise.resolve(sink.latest?.received ?? 0), 'subscriber');
      await gen.stop();
      await sink.stop();
      const delivered = best(steps).received;
      log(`    => the broker delivers ${delivered} msg/s`);
      return { sustainableMsgsPerSec: delivered, loadAverage: Number(os.loadavg()[0]!.toFixed(1)), steps };
    };
    const serviceRun = async (svc: Service, baseline: number) => {
      log('(b) the same, into the service');
      const gen = child<LoadProgress>('ingest-load.js', loadConfig(DEVICES, START_RATE));
      await gen.ready;
      const rss: number[] = [];
      const rssTimer = setInterval(() => rss.push(svc.rssMb()), 1000);
      const steps = await sustainable(gen, async () => (await svc.metrics()).ingest_messages_stored_total ?? 0, 'service');
      clearInterval(rssTimer);
      await gen.stop();
      // Let it catch up before the next phase.
      for (let i = 0; i < 120 && ((await svc.metrics()).ingest_queue_depth ?? 0) > 0; i++) await sleep(500);
      const m = await svc.metrics();
      const top = best(steps);
      log(
        `    => the service commits ${top.received} msg/s (${top.received * 3} values/s); ratio ${baseline ? (top.received / baseline).toFixed(3) : '?'}`,
      );
      return {
        sustainableMsgsPerSec: top.received,
        sustainableValuesPerSec: top.received * 3,
        ratioToBaseline: baseline ? Number((top.received / baseline).toFixed(3)) : undefined,
        meanRowsPerCopy: Math.round(m.ingest_values_stored_total! / m.ingest_batch_rows_count!),
        meanCopyMs: Number(((1000 * m.ingest_copy_duration_seconds_sum!) / m.ingest_copy_duration_seconds_count!).toFixed(1)),
        rssMbDuringIngest: rss.length ? Math.round(Math.max(...rss)) : undefined,
        dropped: Object.fromEntries(Object.entries(m).filter(([k, v]) => k.startsWith('ingest_dropped_total') && v > 0)),
        loadAverage: Number(os.loadavg()[0]!.toFixed(1)),
        steps,
      };
    };
    let baseline = Number(process.env.BENCH_BASELINE_RATE ?? 0);
    const rounds: Array<Record<string, unknown>> = [];
    for (let round = 1; round <= ROUNDS && (PHASES.includes('a') || PHASES.includes('b')); round++) {
      const r: Record<string, unknown> = { round };
      if (PHASES.includes('a')) {
        const a = await baselineRun();
        baseline = a.sustainableMsgsPerSec;
        r.a = a;
      }
      if (PHASES.includes('b')) {
        // Every round starts from an empty table: an index that has outgrown shared_buffers
        // makes each insert dearer (see phase e), and rounds must be comparable.
        await db.query('TRUNCATE history');
        const svc = await startService(databaseUrl);
        try {
          r.b = await serviceRun(svc, baseline);
        } finally {
          await svc.stop();
        }
      }
      rounds.push(r);
    }
    results.rounds = rounds;
    const lastService = (rounds.at(-1)?.b as { sustainableMsgsPerSec?: number } | undefined)?.sustainableMsgsPerSec ?? 0;

    // (c) at half of (a), as asked, and at half of what the service sustained in (b); each on an
    // empty table in a fresh service, like (b).
    const latencyAt = async (rate: number, what: string) => {
      log(`(c) ${rate} msg/s (${what}) with probe messages: publish-to-queryable latency`);
      await db.query('TRUNCATE history');
      const svc = await startService(databaseUrl);
      const gen = child<LoadProgress>('ingest-load.js', loadConfig(DEVICES, rate));
      try {
        await gen.ready;
        await sleep(SETTLE_SECONDS * 1000);
        const probeClient = await mqtt.connectAsync(MQTT_URL, {
          protocolVersion: 4,
          clientId: `bench-probe-${probe}`,
          username: `${tenant}:${probe}`,
        });
        const latencies: number[] = [];
        const m0 = await svc.metrics();
        const p0 = gen.latest?.acked ?? 0;
        const t0 = performance.now();
        let k = 0;
        while (performance.now() - t0 < LATENCY_SECONDS * 1000) {
          const value = ++k + 0.5;
          const sent = performance.now();
          await probeClient.publishAsync(`${tenant}:${probe}/attrs`, JSON.stringify({ temperature: value }), { qos: 1 });
          let late = false;
          for (;;) {
            const res = await fetch(`${svc.base}/history/device/${probe}/history?lastN=1&attr=temperature`, {
              headers: { authorization: `Bearer ${svc.token}` },
            });
            const body = (await res.json()) as Array<{ value: number }>;
            if (body[0]?.value === value) break;
            if (performance.now() - sent > 30_000) {
              late = true; // the service is not keeping up with this rate: give up on this probe
              break;
            }
            await sleep(2);
          }
          latencies.push(performance.now() - sent);
          if (late) break;
          await sleep(50);
        }
        const secs = (performance.now() - t0) / 1000;
        const m1 = await svc.metrics();
        await probeClient.endAsync();
        latencies.sort((a, b) => a - b);
        const out = {
          offeredMsgsPerSec: rate,
          publishedMsgsPerSec: Math.round(((gen.latest?.acked ?? 0) - p0) / secs),
          committedMsgsPerSec: Math.round((m1.ingest_messages_stored_total! - m0.ingest_messages_stored_total!) / secs),
          probes: latencies.length,
          under1s: latencies.filter((l) => l < 1000).length,
          p50Ms: Number(percentile(latencies, 50).toFixed(1)),
          p99Ms: Number(percentile(latencies, 99).toFixed(1)),
          maxMs: Number(latencies.at(-1)!.toFixed(1)),
          loadAverage: Number(os.loadavg()[0]!.toFixed(1)),
        };
        log(
          `    p50 ${out.p50Ms} ms, p99 ${out.p99Ms} ms over ${out.probes} probes (${out.under1s} under 1 s), committed ${out.committedMsgsPerSec} msg/s`,
        );
        return out;
      } finally {
        await gen.stop();
        await svc.stop();
      }
    };
    if (PHASES.includes('c')) {
      results.c = { halfOfBaseline: await latencyAt(Math.round(baseline / 2), 'half of (a)') };
      if (lastService) (results.c as Record<string, unknown>).halfOfService = await latencyAt(Math.round(lastService / 2), 'half of (b)');
    }

    if (PHASES.includes('e')) {
      // Where the CPU goes: CPU seconds of each process over a steady window at a fixed rate,
      // on an empty table and on one whose current partition holds 10 million rows.
      const rate = Number(process.env.BENCH_COST_RATE ?? 8000);
      const ticks = (pid: number) => {
        try {
          const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
          return Number(f[11]) + Number(f[12]);
        } catch {
          return 0;
        }
      };
      const mosquitto = () => Number(fs.readFileSync('/run/mosquitto/mosquitto.pid', 'utf8').trim()) || 0;
      // CPU seconds of the generator, the broker and the receiving processes (groups of pids)
      // over a steady window, per message received.
      const window = async (
        gen: Child<LoadProgress>,
        receivers: () => Promise<Record<string, number[]>>,
        received: () => Promise<number>,
        label: string,
      ) => {
        await sleep(SETTLE_SECONDS * 2000);
        const groups = { generator: [gen.pid], broker: [mosquitto()], ...(await receivers()) };
        const snap = () => Object.fromEntries(Object.entries(groups).map(([k, pids]) => [k, pids.reduce((a, p) => a + ticks(p), 0)]));
        const r0 = await received();
        log(`    measuring ${label} for ${STEP_SECONDS * 2} s`);
        const s0 = snap();
        const t0 = performance.now();
        await sleep(STEP_SECONDS * 2000);
        const s1 = snap();
        const msgs = (await received()) - r0;
        const secs = (performance.now() - t0) / 1000;
        // 100 ticks a second
        const perMessage = Object.fromEntries(
          Object.keys(groups).map((k) => [k, Number((((s1[k]! - s0[k]!) * 10_000) / msgs).toFixed(1))]),
        );
        log(`    µs of CPU per message: ${JSON.stringify(perMessage)}`);
        return { rateMsgsPerSec: Math.round(msgs / secs), cpuMicrosecondsPerMessage: perMessage };
      };
      // The same path into the do-nothing subscriber: what the baseline (a) spends per message.
      const baselineCost = async () => {
        log(`(e) CPU per message at ${rate} msg/s into the do-nothing subscriber: generator, broker, subscriber`);
        const sink = startSink();
        await sink.ready;
        const gen = child<LoadProgress>('ingest-load.js', loadConfig(DEVICES, rate));
        try {
          await gen.ready;
          return await window(
            gen,
            () => Promise.resolve({ subscriber: [sink.pid] }),
            () => Promise.resolve(sink.latest?.received ?? 0),
            'the subscriber',
          );
        } finally {
          await gen.stop();
          await sink.stop();
        }
      };
      const cost = async (what: string) => {
        log(`(e) CPU per message at ${rate} msg/s, ${what}: generator, broker, service, PostgreSQL`);
        const storedBefore = Number((await db.query<{ count: string }>('SELECT count(*) FROM history')).rows[0]!.count);
        const svc = await startService(databaseUrl);
        const gen = child<LoadProgress>('ingest-load.js', loadConfig(DEVICES, rate));
        try {
          await gen.ready;
          const backends = async () =>
            (
              await db.query<{ pid: number }>(
                'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
              )
            ).rows.map((r) => r.pid);
          const stored = async () => (await svc.metrics()).ingest_messages_stored_total!;
          const w = await window(
            gen,
            async () => ({ service: [svc.proc.pid!], postgres: await backends() }),
            stored,
            `the service (pid ${svc.proc.pid})`,
          );
          return { rowsInHistoryBefore: storedBefore, ...w };
        } finally {
          await gen.stop();
          await svc.stop();
        }
      };
      const baseline = await baselineCost();
      await db.query('TRUNCATE history');
      const empty = await cost('empty table');
      // BENCH_COST_EMPTY_ONLY=1: the empty table only (comparing two builds of the service).
      if (process.env.BENCH_COST_EMPTY_ONLY === '1') {
        results.e = { baseline, emptyTable: empty };
      } else {
        // 10 million rows in today's partition, spread over the fleet's series like real traffic.
        await db.query(
          `INSERT INTO history (tenant, device_id, attr, series, ts, value)
           SELECT $1, d, a, history_series($1, d, a), date_trunc('day', now()) + random() * (now() - date_trunc('day', now())), '21.5'
             FROM (SELECT lpad(to_hex((random() * ($2 - 1))::int), 6, '0') AS d, (ARRAY['temperature','humidity','pressure'])[1 + (i % 3)] AS a
                     FROM generate_series(1, 10000000) i) s`,
          [tenant, DEVICES],
        );
        const full = await cost('10 million rows in the current partition');
        results.e = { baseline, emptyTable: empty, tenMillionRows: full };
      }
    }

    if (PHASES.includes('d')) {
      // The same number of messages from 1,000 devices and from CACHE_DEVICES devices, each into
      // a freshly started service: the difference is what the device caches cost.
      const memory = async (devices: number) => {
        const svc = await startService(databaseUrl);
        try {
          await sleep(2000);
          const idle = svc.rssMb();
          // Ten devices a connection: 100,000 connections would exceed the file descriptor limits.
          const gen = child<LoadProgress>('ingest-load.js', {
            ...loadConfig(devices, 10_000, Math.max(1, Math.round(devices / 10_000))),
            window: 1,
          });
          await gen.ready;
          const want = devices >= CACHE_DEVICES ? CACHE_DEVICES : 0;
          for (let i = 0; i < 600; i++) {
            const m = await svc.metrics();
            if ((m.ingest_cached_devices ?? 0) >= want && (m.ingest_messages_stored_total ?? 0) >= CACHE_DEVICES) break;
            await sleep(500);
          }
          await gen.stop();
          await sleep(3000);
          return { idle: Math.round(idle), after: Math.round(svc.rssMb()), cached: (await svc.metrics()).ingest_cached_devices ?? 0 };
        } finally {
          await svc.stop();
        }
      };
      log(`(d) resident memory: ${CACHE_DEVICES} messages from 1,000 devices, then from ${CACHE_DEVICES} devices`);
      const few = await memory(1000);
      const many = await memory(CACHE_DEVICES);
      results.d = {
        messages: CACHE_DEVICES,
        rssMbAfterStart: many.idle,
        rssMbWith1000DevicesCached: few.after,
        cachedDevices: many.cached,
        rssMbWithAllCached: many.after,
        kbPerCachedDevice: Number((((many.after - few.after) * 1024) / (CACHE_DEVICES - 1000)).toFixed(2)),
      };
      log(`    1,000 devices: RSS ${few.after} MB; ${many.cached} devices cached: RSS ${many.after} MB (after start: ${many.idle} MB)`);
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
