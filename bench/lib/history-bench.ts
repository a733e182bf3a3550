// Shared pieces of the history benchmarks (bench/history-chunks.ts, bench/history-scale.ts):
// a database (a fresh one on BENCH_DATABASE_URL's server, or an embedded PostgreSQL when it is
// not set), the service as its own process (from BENCH_SERVICE_ROOT, default this checkout, so
// two builds can be measured with the same benchmark), set-based seeding of devices and
// values, and the two ways of measuring reads (concurrent clients, one sequential client).
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { readConfig } from '../../src/config.js';
import { startEmbeddedDatabase } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';
import { projectRoot } from '../../src/paths.js';
import { benchServiceEnv, benchUserToken, readyAddress } from './harness.js';
import { load, type LoadResult } from './load.js';

export const tenant = 'bench';
export const ATTRS = ['temperature', 'humidity', 'pressure'];
export const log = (msg: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A device id as the ingest load generator numbers them (6 hex digits). */
export const deviceId = (n: number) => n.toString(16).padStart(6, '0');

export interface BenchDatabase {
  url: string;
  /** What it is, for the report. */
  server: string;
  stop(): Promise<void>;
}

/**
 * A fresh database on BENCH_DATABASE_URL's server (dropped at the end unless BENCH_KEEP=1), or
 * an embedded PostgreSQL with the service's own embedded settings (EMBEDDED_PG_SETTINGS applies).
 */
export async function openDatabase(): Promise<BenchDatabase> {
  const admin = process.env.BENCH_DATABASE_URL;
  if (!admin) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dr-bench-hist-pg-'));
    fs.chmodSync(dir, 0o755);
    const settings = readConfig({ EMBEDDED_PG_SETTINGS: process.env.EMBEDDED_PG_SETTINGS }).embeddedPgSettings;
    const db = await startEmbeddedDatabase({ dataDir: dir, port: undefined, settings, log: createLogger('warn') });
    return {
      url: db.url,
      server: `embedded PostgreSQL (${Object.entries(settings)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ')})`,
      async stop() {
        await db.stop();
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const name = `dr_bench_hist_${crypto.randomBytes(4).toString('hex')}`;
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  await client.query(`CREATE DATABASE "${name}"`);
  const url = new URL(admin);
  url.pathname = '/' + name;
  const server = (
    await client.query<{ v: string }>(
      `SELECT version() || coalesce(', timescaledb ' || (SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'), '') || ', shared_buffers ' || current_setting('shared_buffers') AS v`,
    )
  ).rows[0]!.v;
  return {
    url: url.toString(),
    server: `${admin.replace(/\/\/[^@]*@/, '//')}: ${server}`,
    async stop() {
      if (process.env.BENCH_KEEP === '1') log(`kept the database ${name}`);
      else await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).catch(() => undefined);
      await client.end();
    },
  };
}

export interface BenchService {
  base: string;
  /** A token of a user of the bench tenant. */
  token: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** The service (`<BENCH_SERVICE_ROOT>/dist/src/main.js`) on `databaseUrl`; BENCH_SVC_<NAME> variables pass through. */
export async function startService(databaseUrl: string, env: Record<string, string> = {}): Promise<BenchService> {
  const root = process.env.BENCH_SERVICE_ROOT ?? projectRoot;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'dr-bench-hist-'));
  const proc = spawn(process.execPath, [path.join(root, 'dist/src/main.js')], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: databaseUrl,
      PSK_ENCRYPTION_KEY: crypto.randomBytes(32).toString('hex'),
      ADMIN_PASSWORD: 'admin',
      DATA_DIR: dataDir,
      HOST: '127.0.0.1',
      PORT: '0',
      INTERNAL_PORT: '0',
      MQTT_HOST: '127.0.0.1',
      MQTT_PORT: '0',
      LOG_LEVEL: 'info',
      ...benchServiceEnv(),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const base = await readyAddress(proc);
  const token = await benchUserToken(base, tenant);
  return {
    base,
    token,
    proc,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        await new Promise((r) => proc.once('exit', r));
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A template with ATTRS and `devices` devices 000000.. of the bench tenant. */
export async function seedDevices(pool: pg.Pool, devices: number): Promise<void> {
  const { rows } = await pool.query<{ id: string }>("INSERT INTO templates (tenant, label) VALUES ($1, 'bench') RETURNING id", [tenant]);
  for (const a of ATTRS)
    await pool.query("INSERT INTO template_attrs (tenant, template_id, label, type, value_type) VALUES ($1, $2, $3, 'dynamic', 'float')", [
      tenant,
      rows[0]!.id,
      a,
    ]);
  await pool.query(`INSERT INTO devices (tenant, id, label) SELECT $1, lpad(to_hex(d), 6, '0'), 'dev' FROM generate_series(0, $2 - 1) d`, [
    tenant,
    devices,
  ]);
  await pool.query(
    `INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, lpad(to_hex(d), 6, '0'), $3 FROM generate_series(0, $2 - 1) d`,
    [tenant, devices, rows[0]!.id],
  );
}

/**
 * `perSeries` values of every device attribute, one every `stepSeconds` back from `endMs`,
 * written set-based, `slice` devices per statement (one transaction each). Plain PostgreSQL
 * gets the partitions first (history_ensure_partition); TimescaleDB makes its chunks.
 */
export async function seedValues(
  pool: pg.Pool,
  o: { devices: number; perSeries: number; stepSeconds: number; endMs: number; slice?: number },
): Promise<void> {
  const end = new Date(o.endMs).toISOString();
  await pool.query(
    `SELECT history_ensure_partition(g) FROM history_settings s,
            LATERAL (SELECT generate_series($1::timestamptz - $2 * interval '1 second', $1::timestamptz, s.chunk_interval) UNION ALL SELECT $1::timestamptz) x(g)`,
    [end, o.perSeries * o.stepSeconds],
  );
  const slice = o.slice ?? 500;
  const t0 = performance.now();
  for (let from = 0; from < o.devices; from += slice) {
    await pool.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT $1, lpad(to_hex(d), 6, '0'), a, history_series($1, lpad(to_hex(d), 6, '0'), a),
              $6::timestamptz - i * $5::float8 * interval '1 second' - (d % 60) * interval '1 second', round((random() * 100)::numeric, 2)::text
         FROM generate_series($2::int, $3::int) d, unnest($7::text[]) a, generate_series(0, $4 - 1) i`,
      [tenant, from, Math.min(from + slice, o.devices) - 1, o.perSeries, o.stepSeconds, end, ATTRS],
    );
    const done = Math.min(from + slice, o.devices);
    if (done % (slice * 10) === 0 || done === o.devices) {
      const secs = (performance.now() - t0) / 1000;
      log(
        `  ${(done * ATTRS.length * o.perSeries).toLocaleString('en')} values written (${Math.round((done * ATTRS.length * o.perSeries) / secs).toLocaleString('en')}/s)`,
      );
    }
  }
}

/**
 * The service's schema on a fresh database, ready for a bulk load: the service is started once
 * (it migrates) and stopped, then history_reopen() and history_rollup_rebuild() (where the build
 * has them) let the values load without the per-row triggers; the next start writes the series'
 * spans and the hourly rollups from the rows.
 */
export async function prepareSchema(url: string, pool: pg.Pool, env: Record<string, string> = {}): Promise<void> {
  const svc = await startService(url, env);
  await svc.stop();
  for (const fn of ['history_reopen', 'history_rollup_rebuild']) {
    const { rows } = await pool.query<{ has: boolean }>(`SELECT to_regproc($1) IS NOT NULL AS has`, [fn]);
    if (rows[0]!.has) await pool.query(`SELECT ${fn}()`);
  }
}

/** Waits until the service has moved the open region and rolled up the history (builds without them: at once), plus its 5 s horizon refresh. */
export async function openRegionReady(pool: pg.Pool): Promise<number> {
  const t0 = performance.now();
  const has = (
    await pool.query<{ has: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'history_settings' AND column_name = 'closed_before') AS has`,
    )
  ).rows[0]!.has;
  if (!has) return 0;
  while (!(await pool.query<{ set: boolean }>(`SELECT closed_before > '-infinity' AS set FROM history_settings`)).rows[0]!.set)
    await sleep(500);
  // The first rollup pass reads every row once (builds with rollups): not during the measurement.
  const rollups = (
    await pool.query<{ has: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'history_settings' AND column_name = 'rolled_before') AS has`,
    )
  ).rows[0]!.has;
  while (
    rollups &&
    !(
      await pool.query<{ done: boolean }>(
        `SELECT rolled_before >= date_bin(interval '1 hour', now() - interval '6 minutes', timestamptz 'epoch') AS done FROM history_settings`,
      )
    ).rows[0]!.done
  )
    await sleep(500);
  const seconds = (performance.now() - t0) / 1000;
  await sleep(6000);
  return Math.round(seconds);
}

/** Whether the database got the TimescaleDB layout. */
export async function isTimescale(pool: pg.Pool): Promise<boolean> {
  return (await pool.query<{ timescale: boolean }>('SELECT timescale FROM history_settings')).rows[0]!.timescale;
}

/** `connections` clients for `seconds` (autocannon), each request a new path. */
export function concurrent(svc: BenchService, name: string, next: () => string, seconds: number, connections = 16): Promise<LoadResult> {
  return load({ name, url: svc.base, token: svc.token, path: next, seconds, connections });
}

export interface Latency {
  requests: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

/**
 * One client, one request after the other, for `seconds` (with `paceMs`, one every paceMs at
 * most): latency as a user sees it. node:http
 * with keep-alive (fetch adds its own ~0.5 ms and GC pauses). Fails on any non-200 answer.
 */
export async function sequential(svc: BenchService, next: () => string, seconds: number, paceMs = 0): Promise<Latency> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const headers = { authorization: `Bearer ${svc.token}` };
  const one = (p: string) =>
    new Promise<number>((resolve, reject) => {
      const t = performance.now();
      http
        .get(`${svc.base}${p}`, { headers, agent }, (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve(performance.now() - t) : reject(new Error(`${p}: ${res.statusCode}`))));
        })
        .on('error', reject);
    });
  const times: number[] = [];
  const until = performance.now() + seconds * 1000;
  while (performance.now() < until) {
    const t = performance.now();
    times.push(await one(next()));
    // Paced: the next request no sooner than paceMs after this one started (a dashboard's refresh).
    if (paceMs > 0) await sleep(Math.max(0, paceMs - (performance.now() - t)));
  }
  agent.destroy();
  times.sort((a, b) => a - b);
  return { requests: times.length, p50Ms: +pct(times, 50).toFixed(2), p99Ms: +pct(times, 99).toFixed(2), maxMs: +times.at(-1)!.toFixed(2) };
}

/** CPU time (ms) used so far by a process, from /proc (clock ticks of 10 ms); 0 once it is gone. */
function cpuMs(pid: number): number {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return 0;
  }
}

/**
 * CPU spent by the service and by the database's server processes for this database between
 * `start()` and `stop()`: what a request costs, far less sensitive to a busy shared machine
 * than requests per second. The server processes are the client backends connected to the
 * database (pg_stat_activity), read on this machine's /proc: the service's connections.
 */
export async function cpuMeter(pool: pg.Pool, servicePid: number): Promise<{ stop(): Promise<{ serviceMs: number; databaseMs: number }> }> {
  // Client backends only (not autovacuum or TimescaleDB's jobs), and not this meter's own.
  const backends = async () =>
    (
      await pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`,
      )
    ).rows.map((r) => r.pid);
  const before = new Map<number, number>((await backends()).map((pid) => [pid, cpuMs(pid)]));
  const service0 = cpuMs(servicePid);
  return {
    async stop() {
      let databaseMs = 0;
      for (const pid of new Set([...before.keys(), ...(await backends())])) databaseMs += Math.max(0, cpuMs(pid) - (before.get(pid) ?? 0));
      return { serviceMs: cpuMs(servicePid) - service0, databaseMs };
    },
  };
}
