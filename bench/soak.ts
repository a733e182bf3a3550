// The soak benchmark (issue 19): the service under steady load for a long time. 10,000
// simulated devices (bench/ingest-load.ts, QoS 1, 3 values a message) publish at a fixed rate
// for SOAK_MINUTES (30); every minute it reports the rate stored, the rate acknowledged, the
// publish-to-PUBACK latency (p50, p99, max), the longest time without any PUBACK, and the
// service's resident memory. It passes when
//   - the last window's stored rate is at least 0.9 x the first window's (windows of 5 minutes,
//     a third of the run when it is shorter),
//   - RSS is flat: the last window's mean at most 10 % above the second window's (the first
//     holds the warm-up: caches filling, the heap growing to its working size),
//   - nothing is lost: every message a device saw acknowledged is in history, and nothing was
//     dropped.
// The rate: SOAK_RATE, or else the highest the service sustains, found first by raising the
// offered rate 20 % a step (SOAK_STEP_SECONDS each) until the devices' acknowledged rate or the
// stored rate falls under 97 % of the offer twice in a row, times SOAK_RATE_FACTOR (1).
//
// SOAK_BROKER=embedded (default): the service's embedded broker, whose PUBACK to a device is
// sent after the commit, so the latencies and gaps are the service's own acknowledgements; an
// embedded PostgreSQL in a temporary directory (EMBEDDED_PG_SETTINGS applies), as bench/lib/harness.ts
// starts it. SOAK_BROKER=external: the machine's Mosquitto (BENCH_MQTT_URL) between devices and
// service (the PUBACKs are then the broker's; the stored rate per second is the service's).
// BENCH_SVC_<NAME>=value passes settings to the service. SOAK_REGISTERED: devices registered in
// all (default SOAK_DEVICES), the first SOAK_DEVICES of which publish; written with SQL, so the
// HTTP view caches stay empty, as after a restart.
//
//   npm run build && node dist/bench/soak.js                     (30 minutes, the full run)
//   SOAK_MINUTES=3 SOAK_RATE=8000 node dist/bench/soak.js         (a short check)
import { fork } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { projectRoot } from '../src/paths.js';
import { endSession } from '../src/broker/session-drain.js';
import { subscriberClientId } from '../src/broker/external.js';
import { startBenchService, type BenchService } from './lib/harness.js';
import { addInto, percentile, type Histogram } from './lib/ack-stats.js';
import type { LoadConfig, LoadProgress } from './ingest-load.js';

const MINUTES = Number(process.env.SOAK_MINUTES ?? 30);
const DEVICES = Number(process.env.SOAK_DEVICES ?? 10_000);
// Devices registered in all (SOAK_DEVICES of them publish): issue 19's memory case is 100,000.
const REGISTERED = Math.max(DEVICES, Number(process.env.SOAK_REGISTERED ?? DEVICES));
const BROKER = process.env.SOAK_BROKER ?? 'embedded';
const EXTERNAL_URL = process.env.BENCH_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const START_RATE = Number(process.env.SOAK_START_RATE ?? 5000);
const STEP_SECONDS = Number(process.env.SOAK_STEP_SECONDS ?? 10);
const RATE_FACTOR = Number(process.env.SOAK_RATE_FACTOR ?? 1);
const WINDOW = Number(process.env.SOAK_WINDOW ?? 4);
const WINDOW_MINUTES = Math.max(1, Math.min(5, Math.floor(MINUTES / 3)));
const KEEP_UP = 0.97;
const WARM_UP_SECONDS = Number(process.env.SOAK_WARM_UP_SECONDS ?? 20);
const CONNECTIONS = 8;
const tenant = 'bench';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

/** The load generator as a child process; every progress report is handed to `onProgress`. */
function generator(
  cfg: LoadConfig,
  onProgress: (p: LoadProgress) => void,
): { ready: Promise<void>; setRate(rate: number): void; stop(): Promise<void> } {
  const proc = fork(path.join(projectRoot, 'dist/bench/ingest-load.js'), [JSON.stringify(cfg)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let stopped: (() => void) | undefined;
  const ready = new Promise<void>((resolve, reject) => {
    proc.on('message', (m: { type: string }) => {
      if (m.type === 'ready') resolve();
      if (m.type === 'progress') onProgress(m as LoadProgress);
      if (m.type === 'stopped') stopped?.();
    });
    proc.once('exit', (code) => reject(new Error(`the load generator exited with ${code}`)));
  });
  return {
    ready,
    setRate: (rate) => proc.send({ type: 'rate', rate }),
    stop: () =>
      new Promise<void>((resolve) => {
        stopped = resolve;
        proc.once('exit', () => resolve());
        proc.send({ type: 'stop' });
      }),
  };
}

function rssMb(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
}

/** The service's counters (summed over shards and reasons). */
async function counters(svc: BenchService): Promise<{ stored: number; queue: number; dropped: number }> {
  const text = await (await fetch(`${svc.base}/metrics`)).text();
  const sum = (name: string) =>
    text
      .split('\n')
      .filter((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'))
      .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  return { stored: sum('ingest_messages_stored_total'), queue: sum('ingest_queue_depth'), dropped: sum('ingest_dropped_total') };
}

interface Minute {
  minute: number;
  ackedPerSec: number;
  storedPerSec: number;
  ackP50Ms: number;
  ackP99Ms: number;
  ackMaxMs: number;
  longestAckGapMs: number;
  rssMb: number;
}

async function main(): Promise<void> {
  const clientId = `soak-${crypto.randomBytes(3).toString('hex')}`;
  const env: Record<string, string> =
    BROKER === 'external'
      ? {
          MQTT_URL: EXTERNAL_URL,
          MQTT_CLIENT_ID: clientId,
          MQTT_SHARE_GROUP: clientId,
          MQTT_SUBSCRIBER_CONNECTIONS: String(CONNECTIONS),
          MQTT_SESSION_EXPIRY_SECONDS: '300',
        }
      : // The soak measures ingest: its generated devices have no credentials (bench/connect-storm.ts measures logins).
        { MQTT_DEVICE_AUTH: 'off' };
  log(`starting the service (${BROKER} broker) and an embedded PostgreSQL`);
  const svc = await startBenchService(env);
  const mqttUrl = BROKER === 'external' ? EXTERNAL_URL : svc.mqttUrl!;
  const results: Record<string, unknown> = {
    machine: `${os.cpus().length} cores (${os.cpus()[0]?.model}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load average at start ${os.loadavg()[0]!.toFixed(1)}`,
    broker: BROKER,
    devices: DEVICES,
    registered: REGISTERED,
    minutes: MINUTES,
    windowMinutes: WINDOW_MINUTES,
  };
  try {
    // Devices 000000.. as the generator names them, one template of 3 float attributes.
    const { rows } = await svc.pool.query<{ id: string }>("INSERT INTO templates (tenant, label) VALUES ($1, 'soak') RETURNING id", [
      tenant,
    ]);
    for (const label of ['temperature', 'humidity', 'pressure']) {
      await svc.pool.query(
        "INSERT INTO template_attrs (tenant, template_id, label, type, value_type) VALUES ($1, $2, $3, 'dynamic', 'float')",
        [tenant, rows[0]!.id, label],
      );
    }
    await svc.pool.query(
      `INSERT INTO devices (tenant, id, label) SELECT $1, lpad(to_hex(i), 6, '0'), 'dev' FROM generate_series(0, $2 - 1) i`,
      [tenant, REGISTERED],
    );
    await svc.pool.query(
      `INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, lpad(to_hex(i), 6, '0'), $3 FROM generate_series(0, $2 - 1) i`,
      [tenant, REGISTERED, rows[0]!.id],
    );

    let acked = 0;
    let hist: Histogram = new Map();
    let gap = 0;
    const gen = generator(
      {
        url: mqttUrl,
        tenant,
        devices: { from: 0, count: DEVICES },
        devicesPerConnection: 1,
        rate: START_RATE,
        window: WINDOW,
        connectConcurrency: 200,
        ackStats: true,
      },
      (p) => {
        acked = p.acked;
        if (p.acks) {
          addInto(hist, p.acks.lat);
          gap = Math.max(gap, p.acks.maxGapMs);
        }
      },
    );
    await gen.ready;
    log(`${DEVICES} devices connected; warming up (${WARM_UP_SECONDS} s at ${Math.round(START_RATE / 2)} msg/s: device caches, JIT)`);
    gen.setRate(Math.round(START_RATE / 2));
    await sleep(WARM_UP_SECONDS * 1000);

    // Waits until the service has taken what the devices sent (its queue is empty).
    const catchUp = async () => {
      gen.setRate(1);
      for (let i = 0; i < 240 && (await counters(svc)).queue > 0; i++) await sleep(500);
    };

    let rate = Number(process.env.SOAK_RATE ?? 0);
    if (!rate) {
      log(`finding the highest sustainable rate (${STEP_SECONDS} s a step, from ${START_RATE} msg/s)`);
      const holds = async (r: number): Promise<boolean> => {
        gen.setRate(r);
        await sleep(2000);
        const a0 = acked;
        const s0 = (await counters(svc)).stored;
        const t0 = performance.now();
        await sleep(STEP_SECONDS * 1000);
        const secs = (performance.now() - t0) / 1000;
        const a = (acked - a0) / secs;
        const s = ((await counters(svc)).stored - s0) / secs;
        const held = a >= KEEP_UP * r && s >= KEEP_UP * r;
        log(`    offered ${r} msg/s: acknowledged ${Math.round(a)}, stored ${Math.round(s)}${held ? '' : ' (behind)'}`);
        if (!held) await catchUp();
        return held;
      };
      const held = async (r: number) => (await holds(r)) || holds(r);
      // Down 20 % a step while the start rate is too much, then up 20 % a step while it holds.
      let good = START_RATE;
      while (!(await held(good))) {
        if (good <= 500) throw new Error('the service does not sustain even 500 msg/s here');
        good = Math.round(good * 0.8);
      }
      let next = Math.round(good * 1.2);
      while (await held(next)) {
        good = next;
        next = Math.round(good * 1.2);
      }
      rate = Math.round(good * RATE_FACTOR);
      results.rateSearch = { highestHeld: good, firstFailed: next };
      await catchUp();
    }
    results.rate = rate;
    log(`soaking at ${rate} msg/s for ${MINUTES} min`);

    gen.setRate(rate);
    await sleep(2000); // the rate settles before the first minute starts
    const minutes: Minute[] = [];
    const base0 = await counters(svc);
    const acked0 = acked;
    let rssSamples: number[] = [];
    const sampler = setInterval(() => rssSamples.push(rssMb(svc.pid)), 5000);
    for (let m = 1; m <= MINUTES; m++) {
      hist = new Map();
      gap = 0;
      rssSamples = [];
      const a0 = acked;
      const s0 = (await counters(svc)).stored;
      const t0 = performance.now();
      await sleep(Math.max(0, t0 + 60_000 - performance.now()));
      const secs = (performance.now() - t0) / 1000;
      rssSamples.push(rssMb(svc.pid));
      const row: Minute = {
        minute: m,
        ackedPerSec: Math.round((acked - a0) / secs),
        storedPerSec: Math.round(((await counters(svc)).stored - s0) / secs),
        ackP50Ms: Number(percentile(hist, 0.5).toFixed(1)),
        ackP99Ms: Number(percentile(hist, 0.99).toFixed(1)),
        ackMaxMs: Number(percentile(hist, 1).toFixed(1)),
        longestAckGapMs: gap,
        rssMb: Math.round(rssSamples.reduce((x, y) => x + y, 0) / rssSamples.length),
      };
      minutes.push(row);
      log(
        `  minute ${m}: stored ${row.storedPerSec} msg/s, acknowledged ${row.ackedPerSec}; ack p50 ${row.ackP50Ms} ms, p99 ${row.ackP99Ms} ms, max ${row.ackMaxMs} ms; longest gap without an ack ${row.longestAckGapMs} ms; RSS ${row.rssMb} MB`,
      );
    }
    clearInterval(sampler);
    await gen.stop();
    for (let i = 0; i < 240 && (await counters(svc)).queue > 0; i++) await sleep(500);
    const end = await counters(svc);

    // Lost: acknowledged to a device but not in history (each message stores 3 values; the
    // search phase's messages count too).
    const storedValues = Number(
      (await svc.pool.query<{ n: string }>('SELECT count(*) AS n FROM history WHERE tenant = $1', [tenant])).rows[0]!.n,
    );
    const storedMessages = Math.floor(storedValues / 3);
    const mean = (rows: Minute[], k: keyof Minute) => rows.reduce((x, r) => x + r[k], 0) / rows.length;
    const first = minutes.slice(0, WINDOW_MINUTES);
    const warm = minutes.slice(WINDOW_MINUTES, 2 * WINDOW_MINUTES);
    const last = minutes.slice(-WINDOW_MINUTES);
    const rateRatio = mean(last, 'storedPerSec') / mean(first, 'storedPerSec');
    const rssGrowth = mean(last, 'rssMb') / mean(warm.length > 0 ? warm : first, 'rssMb') - 1;
    const lost = Math.max(0, acked - storedMessages);
    Object.assign(results, {
      perMinute: minutes,
      firstWindow: { storedPerSec: Math.round(mean(first, 'storedPerSec')), rssMb: Math.round(mean(first, 'rssMb')) },
      secondWindow:
        warm.length > 0 ? { storedPerSec: Math.round(mean(warm, 'storedPerSec')), rssMb: Math.round(mean(warm, 'rssMb')) } : undefined,
      lastWindow: { storedPerSec: Math.round(mean(last, 'storedPerSec')), rssMb: Math.round(mean(last, 'rssMb')) },
      rateRatio: Number(rateRatio.toFixed(3)),
      rssGrowthPct: Number((rssGrowth * 100).toFixed(1)),
      worstAckP99Ms: Math.max(...minutes.map((r) => r.ackP99Ms)),
      longestAckGapMs: Math.max(...minutes.map((r) => r.longestAckGapMs)),
      acknowledged: acked,
      acknowledgedDuringSoak: acked - acked0,
      storedMessages,
      storedDuringSoak: end.stored - base0.stored,
      lost,
      dropped: end.dropped,
      passed: { rate: rateRatio >= 0.9, rss: rssGrowth <= 0.1, nothingLost: lost === 0 && end.dropped === 0 },
      loadAverageAtEnd: Number(os.loadavg()[0]!.toFixed(1)),
    });
    log(
      `rate last/first window ${rateRatio.toFixed(3)}, RSS last/second window ${rssGrowth >= 0 ? '+' : ''}${(rssGrowth * 100).toFixed(1)} %, ${acked} acknowledged, ${storedMessages} stored, ${lost} lost, ${end.dropped} dropped`,
    );
  } finally {
    await svc.stop();
    if (BROKER === 'external') {
      // The service kept its sessions (the last instance does): end them.
      for (let n = 0; n < CONNECTIONS; n++) await endSession(EXTERNAL_URL, subscriberClientId(clientId, n), 5).catch(() => undefined);
    }
  }
  console.log(JSON.stringify(results, null, 2));
}

await main();
