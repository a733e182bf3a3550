// History for readers (issue 22), through the HTTP API of a spawned service on the machine's
// PostgreSQL (BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres; a fresh
// database is created and dropped):
//   * aggregate: one day of 1 Hz values of one attribute (86,400 rows) -> 24 hourly avg,min,max,
//     BENCH_READERS_REQUESTS sequential requests, p50/p99;
//   * latest: POST /history/latest, 3 attributes x 1,000 devices, p50/p99;
//   * export: GET /history/export of BENCH_EXPORT_ROWS rows (1,000,000) as CSV, read as fast as
//     possible: rows/s, and the service's RSS before and at its peak (sampled every 50 ms from
//     /proc), for a fast and for a slow reader (paused 20 ms after every 64 KiB).
//   * readers vs ingest: the MQTT load generator (bench/ingest-load.ts, the 1,000 devices, flat
//     out) through BENCH_MQTT_URL (mqtt://127.0.0.1:1883, the machine's Mosquitto) for
//     BENCH_INGEST_SECONDS (15) without readers, then as long with 50 concurrent aggregate
//     readers, BENCH_INGEST_ROUNDS (2) times alternately: acknowledged messages/s of both kinds
//     of window and the ratio of their means (same run), the readers' reads/s and latencies.
//     The readers are held by the service's read gate while the host is saturated
//     (HISTORY_READ_SHARE_PERCENT; BENCH_SVC_HISTORY_READ_SHARE_PERCENT=100 measures without it).
//   npm run build && node dist/bench/history-readers.js
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { projectRoot } from '../src/paths.js';
import { benchServiceEnv, externalBrokerService } from './lib/harness.js';
import { generator } from './lib/load-generator.js';

const ADMIN_DB = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REQUESTS = Number(process.env.BENCH_READERS_REQUESTS ?? 300);
const EXPORT_ROWS = Number(process.env.BENCH_EXPORT_ROWS ?? 1_000_000);
const DEVICES = 1000;
const MQTT_URL = process.env.BENCH_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const INGEST_SECONDS = Number(process.env.BENCH_INGEST_SECONDS ?? 15);
const INGEST_ROUNDS = Number(process.env.BENCH_INGEST_ROUNDS ?? 2);
const READERS = 50;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ATTRS = ['temperature', 'humidity', 'pressure'];
const tenant = 'bench';

const log = (msg: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const rssMb = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
};

async function main(): Promise<void> {
  const dbName = `dr_bench_readers_${crypto.randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_DB });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${dbName}"`);
  const url = new URL(ADMIN_DB);
  url.pathname = '/' + dbName;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'dr-bench-readers-'));
  const broker = externalBrokerService(MQTT_URL, 'bench-readers');
  const proc = spawn(process.execPath, [path.join(projectRoot, 'dist/src/main.js')], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATABASE_URL: url.toString(),
      PSK_ENCRYPTION_KEY: crypto.randomBytes(32).toString('hex'),
      ADMIN_PASSWORD: 'admin',
      DATA_DIR: dataDir,
      HOST: '127.0.0.1',
      PORT: '0',
      INTERNAL_PORT: '0',
      ...broker.env,
      MQTT_SESSION_EXPIRY_SECONDS: '60',
      LOG_LEVEL: 'info',
      ...benchServiceEnv(),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const results: Record<string, unknown> = { machine: `${os.cpus().length} cores, node ${process.version}` };
  const db = new pg.Pool({ connectionString: url.toString(), max: 2 });
  try {
    const base = await new Promise<string>((resolve, reject) => {
      let buf = '';
      let address: string | undefined;
      proc.stdout.on('data', (d: Buffer) => {
        buf += d.toString();
        for (const line of buf.split('\n')) {
          if (line.includes('public HTTP API listening')) address = (JSON.parse(line) as { address: string }).address;
          if (line.includes('"msg":"ready"') && address) resolve(address);
        }
        buf = buf.slice(buf.lastIndexOf('\n') + 1);
      });
      proc.once('exit', (code) => reject(new Error(`service exited with ${code}`)));
    });
    const { rows } = await db.query<{ id: string }>("INSERT INTO templates (tenant, label) VALUES ($1, 'bench') RETURNING id", [tenant]);
    const templateId = rows[0]!.id;
    for (const a of ATTRS)
      await db.query("INSERT INTO template_attrs (tenant, template_id, label, type, value_type) VALUES ($1, $2, $3, 'dynamic', 'float')", [
        tenant,
        templateId,
        a,
      ]);
    await db.query(`INSERT INTO devices (tenant, id, label) SELECT $1, lpad(to_hex(d), 6, '0'), 'dev' FROM generate_series(0, $2) d`, [
      tenant,
      DEVICES,
    ]);
    await db.query(
      `INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, lpad(to_hex(d), 6, '0'), $3 FROM generate_series(0, $2) d`,
      [tenant, DEVICES, templateId],
    );
    await db.query(`SELECT history_ensure_partition(now() - g * interval '1 hour') FROM generate_series(0, 24 * 14) g`);
    // Device 000000..0003e7: 10 values of each attribute in the last hour (latest).
    await db.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT $1, lpad(to_hex(d), 6, '0'), a, history_series($1, lpad(to_hex(d), 6, '0'), a), now() - i * interval '5 minutes', (random() * 100)::numeric(6,2)::text
         FROM generate_series(0, $2 - 1) d, unnest($3::text[]) a, generate_series(1, 10) i`,
      [tenant, DEVICES, ATTRS],
    );
    // Device 0003e8 (the 1001st): one day of 1 Hz temperatures (aggregate), yesterday, and EXPORT_ROWS
    // humidity values (export), one every 0.5 s back from now.
    const dev = (1000).toString(16).padStart(6, '0');
    const day0 = new Date(Date.now() - 2 * 86_400_000);
    day0.setUTCHours(0, 0, 0, 0);
    await db.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT $1, $2, 'temperature', history_series($1, $2, 'temperature'), $3::timestamptz + i * interval '1 second', (20 + 5 * sin(i / 3600.0))::numeric(8,3)::text
         FROM generate_series(0, 86399) i`,
      [tenant, dev, day0.toISOString()],
    );
    log(`writing ${EXPORT_ROWS} export rows`);
    await db.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT $1, $2, 'humidity', history_series($1, $2, 'humidity'), now() - i * interval '0.5 second', (i % 1000)::text
         FROM generate_series(1, $3::int) i`,
      [tenant, dev, EXPORT_ROWS],
    );
    await db.query('VACUUM ANALYZE history');
    results.storedValues = Number((await db.query<{ count: string }>('SELECT count(*) FROM history')).rows[0]!.count);

    const post = async (p: string, body: unknown, token?: string) =>
      (
        await fetch(`${base}${p}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
          body: JSON.stringify(body),
        })
      ).json() as Promise<{ jwt: string }>;
    const adminJwt = (await post('/auth', { username: 'admin', passwd: 'admin' })).jwt;
    await post('/auth/user', { username: 'bench', passwd: 'bench-pass', service: tenant, profile: 'user' }, adminJwt);
    const jwt = (await post('/auth', { username: 'bench', passwd: 'bench-pass' })).jwt;
    const headers = { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' };
    const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
    const request = (method: string, p: string, body?: string) =>
      new Promise<{ ms: number; status: number; text: string }>((resolve, reject) => {
        const t = performance.now();
        const req = http.request(`${base}${p}`, { method, headers, agent }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve({ ms: performance.now() - t, status: res.statusCode ?? 0, text }));
        });
        req.on('error', reject);
        req.end(body);
      });
    const measure = async (
      name: string,
      run: () => Promise<{ ms: number; status: number; text: string }>,
      check: (text: string) => boolean,
    ) => {
      for (let i = 0; i < 20; i++) await run();
      const ms: number[] = [];
      for (let i = 0; i < REQUESTS; i++) {
        const r = await run();
        if (r.status !== 200 || !check(r.text)) throw new Error(`${name}: unexpected answer ${r.status} ${r.text.slice(0, 200)}`);
        ms.push(r.ms);
      }
      ms.sort((a, b) => a - b);
      results[name] = { requests: REQUESTS, p50Ms: +pct(ms, 50).toFixed(2), p99Ms: +pct(ms, 99).toFixed(2) };
      log(`${name}: p50 ${pct(ms, 50).toFixed(2)} ms, p99 ${pct(ms, 99).toFixed(2)} ms`);
    };

    const from = day0.toISOString();
    const to = new Date(day0.getTime() + 86_400_000 - 1).toISOString();
    const aggregate = () =>
      request('GET', `/history/device/${dev}/history?attr=temperature&interval=1h&agg=avg,min,max&dateFrom=${from}&dateTo=${to}`);
    const dayOfBuckets = (t: string) => (JSON.parse(t) as unknown[]).length === 24;
    // The seeded rows are late rows to the service (older than its rollups): every hour is read
    // from the rows until the rollup pass the service runs every 5 minutes; run it now, by hand,
    // after measuring the reads from the rows.
    await measure('aggregate86400to24FromRows', aggregate, dayOfBuckets);
    const t0 = performance.now();
    let settled = 0;
    for (;;) {
      const n = (await db.query<{ n: number }>('SELECT history_rollup_refresh(100000) AS n')).rows[0]!.n;
      if (n === 0) break;
      settled += n;
    }
    results.rollupPass = { seriesHours: settled, seconds: +((performance.now() - t0) / 1000).toFixed(2), rows: results.storedValues };
    log(`rollup pass: ${JSON.stringify(results.rollupPass)}`);
    // From the rollups: 23 whole hours, and the last hour's rows up to dateTo (23:59:59.999, not the hour's end).
    await measure('aggregate86400to24', aggregate, dayOfBuckets);
    const ids = Array.from({ length: DEVICES }, (_, d) => d.toString(16).padStart(6, '0'));
    const latestBody = JSON.stringify({ devices: ids, attrs: ATTRS });
    await measure(
      'latest3x1000',
      () => request('POST', '/history/latest', latestBody),
      (t) => (JSON.parse(t) as unknown[]).length === 3 * DEVICES,
    );

    // Export: one stream, rows/s and the service's RSS.
    const exportOnce = (slow: boolean) =>
      new Promise<{ rows: number; seconds: number; rssBeforeMb: number; rssPeakMb: number }>((resolve, reject) => {
        const rssBeforeMb = rssMb(proc.pid!);
        let rssPeakMb = rssBeforeMb;
        const sampler = setInterval(() => (rssPeakMb = Math.max(rssPeakMb, rssMb(proc.pid!))), 50);
        const t = performance.now();
        let newlines = 0;
        http
          .get(`${base}/history/export?devices=${dev}&attr=humidity&format=csv`, { headers, agent }, (res) => {
            let sinceBreak = 0;
            res.on('data', (c: Buffer) => {
              for (let i = c.indexOf(10); i !== -1; i = c.indexOf(10, i + 1)) newlines++;
              sinceBreak += c.length;
              if (slow && sinceBreak >= 65_536) {
                sinceBreak = 0;
                res.pause();
                setTimeout(() => res.resume(), 20);
              }
            });
            res.on('end', () => {
              clearInterval(sampler);
              resolve({ rows: newlines - 1, seconds: (performance.now() - t) / 1000, rssBeforeMb, rssPeakMb });
            });
          })
          .on('error', reject);
      });
    for (const slow of [false, true]) {
      const r = await exportOnce(slow);
      if (r.rows !== EXPORT_ROWS) throw new Error(`export: ${r.rows} rows, expected ${EXPORT_ROWS}`);
      const name = slow ? 'exportSlowReader' : 'export';
      results[name] = {
        rows: r.rows,
        seconds: +r.seconds.toFixed(2),
        rowsPerSecond: Math.round(r.rows / r.seconds),
        rssBeforeMb: Math.round(r.rssBeforeMb),
        rssPeakMb: Math.round(r.rssPeakMb),
        rssGrowthMb: Math.round(r.rssPeakMb - r.rssBeforeMb),
      };
      log(`${name}: ${JSON.stringify(results[name])}`);
    }
    if (INGEST_SECONDS > 0) {
      const gen = generator({
        url: MQTT_URL,
        tenant,
        devices: { from: 0, count: DEVICES },
        devicesPerConnection: 1,
        rate: 0,
        window: 4,
        connectConcurrency: 200,
      });
      // The seeded rows would otherwise bring autovacuum into the first windows (insert threshold).
      await db.query('VACUUM ANALYZE history');
      await db.query('CHECKPOINT');
      await gen.ready;
      log(`ingest flat out: settling 10 s`);
      await sleep(10_000);
      const window = async (readers: number) => {
        const acked0 = gen.latest()?.acked ?? 0;
        const t = performance.now();
        let stop = false;
        const readMs: number[] = [];
        const loops = Array.from({ length: readers }, async () => {
          while (!stop) {
            const r = await request(
              'GET',
              `/history/device/${dev}/history?attr=temperature&interval=1h&agg=avg,min,max&dateFrom=${from}&dateTo=${to}`,
            );
            if (r.status !== 200) throw new Error(`aggregate under ingest: ${r.status}`);
            readMs.push(r.ms);
          }
        });
        await sleep(INGEST_SECONDS * 1000);
        stop = true;
        await Promise.all(loops);
        const secs = (performance.now() - t) / 1000;
        readMs.sort((a, b) => a - b);
        return {
          ackedMsgPerSecond: Math.round(((gen.latest()?.acked ?? 0) - acked0) / secs),
          aggregateReadsPerSecond: +(readMs.length / secs).toFixed(1),
          ...(readMs.length > 0 ? { readP50Ms: +pct(readMs, 50).toFixed(1), readP99Ms: +pct(readMs, 99).toFixed(1) } : {}),
        };
      };
      agent.maxSockets = READERS;
      // Alternated windows, so that a trend of the machine (the service warming up, a checkpoint) is shared by both.
      const withouts: Array<Awaited<ReturnType<typeof window>>> = [];
      const withs: Array<Awaited<ReturnType<typeof window>>> = [];
      for (let round = 0; round < INGEST_ROUNDS; round++) {
        withouts.push(await window(0));
        log(`ingest without readers: ${JSON.stringify(withouts.at(-1))}`);
        withs.push(await window(READERS));
        log(`ingest with ${READERS} aggregate readers: ${JSON.stringify(withs.at(-1))}`);
      }
      await gen.stop();
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
      const without = Math.round(mean(withouts.map((w) => w.ackedMsgPerSecond)));
      const withReaders = Math.round(mean(withs.map((w) => w.ackedMsgPerSecond)));
      results.ingestVsReaders = {
        windows: { withoutReaders: withouts, with50Readers: withs },
        withoutReadersMsgPerSecond: without,
        with50ReadersMsgPerSecond: withReaders,
        ingestRatio: +(withReaders / without).toFixed(3),
      };
    }
    process.stdout.write(JSON.stringify(results, null, 2) + '\n');
  } finally {
    await db.end();
    // (a service that exited already, e.g. at start, has no exit left to wait for)
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
    }
    await broker.endSessions();
    await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`);
    await admin.end();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
