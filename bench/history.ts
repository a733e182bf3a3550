// History query benchmark: GET /history/device/{id}/history?lastN=10&attr=<one label> over at
// least 10 million stored values, on the machine's PostgreSQL (BENCH_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/postgres; a fresh database is created and dropped).
// Values: BENCH_HISTORY_DEVICES devices (10,000) x 3 attributes x BENCH_HISTORY_PER_SERIES
// values (334) spread over the last 7 days (eight daily partitions), written with one INSERT
// per 1,000 devices. Then, through the HTTP API: sequential requests (latency) and 16
// concurrent clients (throughput), each on a random device and attribute.
//   npm run build && node dist/bench/history.js
// BENCH_HISTORY_KEEP=1 keeps the database (its name is printed); BENCH_HISTORY_DB=<name> measures
// again on a kept one without loading it.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { seriesKey } from '../src/history/series.js';
import { projectRoot } from '../src/paths.js';

const ADMIN_DB = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const DEVICES = Number(process.env.BENCH_HISTORY_DEVICES ?? 10_000);
const PER_SERIES = Number(process.env.BENCH_HISTORY_PER_SERIES ?? 334);
const REQUESTS = Number(process.env.BENCH_HISTORY_REQUESTS ?? 5000);
const ATTRS = ['temperature', 'humidity', 'pressure'];
const tenant = 'bench';

const log = (msg: string) => process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

async function main(): Promise<void> {
  const reuse = process.env.BENCH_HISTORY_DB;
  const keep = process.env.BENCH_HISTORY_KEEP === '1' || reuse !== undefined;
  const dbName = reuse ?? `dr_bench_hist_${crypto.randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_DB });
  await admin.connect();
  if (!reuse) await admin.query(`CREATE DATABASE "${dbName}"`);
  const url = new URL(ADMIN_DB);
  url.pathname = '/' + dbName;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'dr-bench-hist-'));
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
      MQTT_HOST: '127.0.0.1',
      MQTT_PORT: '0',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const results: Record<string, unknown> = { machine: `${os.cpus().length} cores, node ${process.version}` };
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
    const db = new pg.Pool({ connectionString: url.toString(), max: 2 });
    if (!reuse) {
      const { rows } = await db.query<{ id: string }>("INSERT INTO templates (tenant, label) VALUES ($1, 'bench') RETURNING id", [tenant]);
      for (const a of ATTRS)
        await db.query(
          "INSERT INTO template_attrs (tenant, template_id, label, type, value_type) VALUES ($1, $2, $3, 'dynamic', 'float')",
          [tenant, rows[0]!.id, a],
        );
      await db.query(
        `INSERT INTO devices (tenant, id, label) SELECT $1, lpad(to_hex(d), 6, '0'), 'dev' FROM generate_series(0, $2 - 1) d`,
        [tenant, DEVICES],
      );
      await db.query(
        `INSERT INTO device_templates (tenant, device_id, template_id) SELECT $1, lpad(to_hex(d), 6, '0'), $3 FROM generate_series(0, $2 - 1) d`,
        [tenant, DEVICES, rows[0]!.id],
      );
      await db.query(`SELECT history_ensure_partition(now() - g * interval '1 day') FROM generate_series(0, 7) g`);

      log(
        `writing ${DEVICES * ATTRS.length * PER_SERIES} values (${DEVICES} devices x ${ATTRS.length} attributes x ${PER_SERIES}) over 7 days`,
      );
      const t0 = performance.now();
      for (let from = 0; from < DEVICES; from += 1000) {
        await db.query(
          `INSERT INTO history (tenant, device_id, attr, series, ts, value)
         SELECT $1, lpad(to_hex(d), 6, '0'), a, history_series($1, lpad(to_hex(d), 6, '0'), a), now() - i * (interval '7 days' / $4), round((random() * 100)::numeric, 2)::text
           FROM generate_series($2::int, $3::int) d, unnest($5::text[]) a, generate_series(0, $4 - 1) i`,
          [tenant, from, Math.min(from + 999, DEVICES - 1), PER_SERIES, ATTRS],
        );
        if (from % 2000 === 0) log(`  ${from + 1000} devices written`);
      }
      await db.query('VACUUM ANALYZE history');
      const count = Number((await db.query<{ count: string }>('SELECT count(*) FROM history')).rows[0]!.count);
      const partitions = Number((await db.query<{ count: string }>('SELECT count(*) FROM history_partitions')).rows[0]!.count);
      results.storedValues = count;
      results.partitions = partitions;
      const loadSeconds = Math.round((performance.now() - t0) / 1000);
      results.loadSeconds = loadSeconds;
      log(`${count} values in ${partitions} partitions (${loadSeconds} s)`);
    } else {
      results.storedValues = Number((await db.query<{ count: string }>('SELECT count(*) FROM history')).rows[0]!.count);
      results.partitions = Number((await db.query<{ count: string }>('SELECT count(*) FROM history_partitions')).rows[0]!.count);
    }

    // A user of the tenant.
    const adminJwt = (
      (await (
        await fetch(`${base}/auth`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ username: 'admin', passwd: 'admin' }),
        })
      ).json()) as { jwt: string }
    ).jwt;
    await fetch(`${base}/auth/user`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${adminJwt}` },
      body: JSON.stringify({ username: 'bench', passwd: 'bench-pass', service: tenant, profile: 'user' }),
    }); // 409 on a kept database: fine
    const jwt = (
      (await (
        await fetch(`${base}/auth`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ username: 'bench', passwd: 'bench-pass' }),
        })
      ).json()) as { jwt: string }
    ).jwt;
    const headers = { authorization: `Bearer ${jwt}` };
    const randomUrl = () => {
      const d = Math.floor(Math.random() * DEVICES)
        .toString(16)
        .padStart(6, '0');
      return `${base}/history/device/${d}/history?lastN=10&attr=${ATTRS[Math.floor(Math.random() * ATTRS.length)]}`;
    };
    // node:http with a keep-alive agent: fetch (undici) adds ~0.5 ms and its own GC pauses to
    // every figure, which would be measured as the service's.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
    const one = () =>
      new Promise<number>((resolve, reject) => {
        const t = performance.now();
        http
          .get(randomUrl(), { headers, agent }, (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (c: string) => (text += c));
            res.on('end', () => {
              const body = JSON.parse(text) as unknown[];
              if (res.statusCode !== 200 || body.length !== 10) reject(new Error(`unexpected answer ${res.statusCode}`));
              else resolve(performance.now() - t);
            });
          })
          .on('error', reject);
      });
    for (let i = 0; i < 500; i++) await one(); // warm up (plans, connections, cache)

    log(`lastN=10, one attribute: ${REQUESTS} sequential requests`);
    const seq: number[] = [];
    for (let i = 0; i < REQUESTS; i++) seq.push(await one());
    seq.sort((a, b) => a - b);
    results.sequential = {
      requests: REQUESTS,
      p50Ms: +pct(seq, 50).toFixed(2),
      p99Ms: +pct(seq, 99).toFixed(2),
      maxMs: +seq.at(-1)!.toFixed(2),
    };
    log(`  p50 ${pct(seq, 50).toFixed(2)} ms, p99 ${pct(seq, 99).toFixed(2)} ms`);

    log(`lastN=10, one attribute: 16 concurrent clients, ${Math.ceil(REQUESTS / 4)} requests each`);
    const conc: number[] = [];
    const tc = performance.now();
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let i = 0; i < REQUESTS / 4; i++) conc.push(await one());
      }),
    );
    const secs = (performance.now() - tc) / 1000;
    conc.sort((a, b) => a - b);
    results.concurrent16 = {
      requests: conc.length,
      perSecond: Math.round(conc.length / secs),
      p50Ms: +pct(conc, 50).toFixed(2),
      p99Ms: +pct(conc, 99).toFixed(2),
    };
    log(`  ${Math.round(conc.length / secs)} req/s, p50 ${pct(conc, 50).toFixed(2)} ms, p99 ${pct(conc, 99).toFixed(2)} ms`);

    // The query alone, as PostgreSQL runs it (the service's statement: series key and texts).
    const plan = await db.query<{ 'QUERY PLAN': Array<{ 'Execution Time': number; 'Planning Time': number }> }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT attr, ts, value, tenant = $1 AND device_id = $2 AND attr = 'temperature' AS mine
         FROM history WHERE series = $3::bigint ORDER BY ts DESC LIMIT 10`,
      [tenant, '0001a4', seriesKey(tenant, '0001a4', 'temperature')],
    );
    const p = plan.rows[0]!['QUERY PLAN'][0]!;
    results.sqlOnly = { planningMs: p['Planning Time'], executionMs: p['Execution Time'] };
    await db.end();
  } finally {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
    }
    fs.rmSync(dataDir, { recursive: true, force: true });
    if (keep) log(`kept the database ${dbName}`);
    else await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
  results.loadAverage = os.loadavg()[0]!.toFixed(1);
  console.log(JSON.stringify(results, null, 2));
}

await main();
