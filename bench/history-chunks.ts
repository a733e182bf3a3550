// History reads as chunks accumulate (issue 20): the same data read with the few chunks of a
// fresh table, then again after a year of daily chunks was added (one row of another series
// in each, as a year of other devices' values would leave them), on either layout.
//   BENCH_DATABASE_URL unset: an embedded PostgreSQL (plain partitions);
//   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5433/postgres: that server (TimescaleDB
//   when it has the extension preloaded; a fresh database is created and dropped).
// Data: BENCH_DEVICES (2,000) devices x 3 attributes, a value every 10 minutes for the last
// 3 days (2.6 million values), daily chunks. Reads through the HTTP API, 16 concurrent clients
// for BENCH_SECONDS (5) per kind, each request a random device (and attribute):
//   lastN      ?lastN=10&attr=<a>
//   lastN all  ?lastN=10                       (every attribute of the device)
//   firstN     ?firstN=10&attr=<a>
//   range      ?attr=<a>&dateFrom=<now-30h>&dateTo=<now-27h>   (18 values)
// with the CPU each request cost the service and the database (from /proc: far steadier than
// req/s on a shared machine), then the statement PostgreSQL runs for lastN, planned and
// executed alone (EXPLAIN ANALYZE).
// The phases alternate BENCH_ROUNDS (2) times (few, year, few, year: the year's chunks are
// dropped and added again) since the machine is shared; each ratio is year / few of one round.
//   npm run build && node dist/bench/history-chunks.js
// BENCH_SERVICE_ROOT=<another checkout, built> measures that build with the same benchmark.
import os from 'node:os';
import pg from 'pg';
import { seriesKey } from '../src/history/series.js';
import {
  ATTRS,
  concurrent,
  cpuMeter,
  deviceId,
  isTimescale,
  log,
  openDatabase,
  openRegionReady,
  prepareSchema,
  seedDevices,
  seedValues,
  startService,
  tenant,
  type BenchService,
} from './lib/history-bench.js';

const DEVICES = Number(process.env.BENCH_DEVICES ?? 2000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);

async function main(): Promise<void> {
  const db = await openDatabase();
  const results: Record<string, unknown> = {
    machine: `${os.cpus().length} cores (${os.cpus()[0]?.model}), node ${process.version}, load average at start ${os.loadavg()[0]!.toFixed(1)}`,
    database: db.server,
    service: process.env.BENCH_SERVICE_ROOT ?? 'this checkout',
  };
  let svc: BenchService | undefined;
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  try {
    await prepareSchema(db.url, pool);
    const timescale = await isTimescale(pool);
    results.layout = timescale ? 'TimescaleDB hypertable' : 'plain PostgreSQL partitions';
    const now = Date.now();
    log(`seeding ${DEVICES} devices, ${(DEVICES * 3 * 432).toLocaleString('en')} values over 3 days (${String(results.layout)})`);
    await seedDevices(pool, DEVICES);
    await seedValues(pool, { devices: DEVICES, perSeries: 432, stepSeconds: 600, endMs: now });
    await pool.query('VACUUM ANALYZE history');
    svc = await startService(db.url);
    await openRegionReady(pool);

    const chunkCount = async () =>
      Number(
        (
          await pool.query<{ count: string }>(
            timescale ? `SELECT count(*) FROM show_chunks('history')` : 'SELECT count(*) FROM history_partitions',
          )
        ).rows[0]!.count,
      );
    const addYear = async () => {
      await pool.query(`SELECT history_ensure_partition(now() - g * interval '1 day') FROM generate_series(4, 368) g`);
      await pool.query(
        `INSERT INTO history (tenant, device_id, attr, series, ts, value)
         SELECT 'other', 'x', 'x', history_series('other', 'x', 'x'), now() - g * interval '1 day', '0' FROM generate_series(4, 368) g`,
      );
      await pool.query('ANALYZE history');
    };
    const dropYear = async () => {
      if (timescale) {
        await pool.query(`SELECT drop_chunks('history', older_than => now() - interval '4 days')`);
      } else {
        const { rows } = await pool.query<{ name: string }>(
          `SELECT name FROM history_partitions WHERE range_end <= now() - interval '4 days'`,
        );
        for (const r of rows) {
          await pool.query(`DROP TABLE "${r.name}"`);
          await pool.query('DELETE FROM history_partitions WHERE name = $1', [r.name]);
        }
      }
      await pool.query('ANALYZE history');
    };

    const rnd = (n: number) => Math.floor(Math.random() * n);
    const dev = () => deviceId(rnd(DEVICES));
    const attr = () => ATTRS[rnd(ATTRS.length)]!;
    const from = encodeURIComponent(new Date(now - 30 * 3_600_000).toISOString());
    const to = encodeURIComponent(new Date(now - 27 * 3_600_000).toISOString());
    const kinds: Array<[string, () => string]> = [
      ['lastN', () => `/history/device/${dev()}/history?lastN=10&attr=${attr()}`],
      ['lastN all', () => `/history/device/${dev()}/history?lastN=10`],
      ['firstN', () => `/history/device/${dev()}/history?firstN=10&attr=${attr()}`],
      ['range', () => `/history/device/${dev()}/history?attr=${attr()}&dateFrom=${from}&dateTo=${to}`],
    ];
    // What PostgreSQL does for one lastN statement of each build (the one before this change had
    // no bound on ts; this one bounds the open region with a literal).
    const sqlOnly = async () => {
      const series = seriesKey(tenant, '0001a4', 'temperature');
      const out: Record<string, unknown> = {};
      const horizon = await pool.query<{ closed_before: Date }>(`SELECT closed_before FROM history_settings`).catch(() => undefined);
      const statements: Array<[string, string]> = [
        ['unbounded', `SELECT ts, value FROM history WHERE series = ${series} ORDER BY ts DESC LIMIT 10`],
      ];
      if (horizon)
        statements.push([
          'open region',
          `SELECT ts, value FROM history WHERE series = ${series} AND ts >= '${horizon.rows[0]!.closed_before.toISOString()}' ORDER BY ts DESC LIMIT 10`,
        ]);
      for (const [name, sql] of statements) {
        await pool.query(`EXPLAIN ANALYZE ${sql}`); // catalog caches warm
        const plan = (
          await pool.query<{ 'QUERY PLAN': Array<{ 'Planning Time': number; 'Execution Time': number }> }>(
            `EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`,
          )
        ).rows[0]!['QUERY PLAN'][0]!;
        out[name] = { planningMs: plan['Planning Time'], executionMs: plan['Execution Time'] };
      }
      return out;
    };

    const warm = async () => {
      for (const [name, next] of kinds) await concurrent(svc!, `${name} (warm-up)`, next, 1);
    };
    const measure = async (phase: string) => {
      const chunks = await chunkCount();
      log(`${phase}: ${chunks} chunks`);
      await warm();
      const out: Record<string, unknown> = { chunks };
      for (const [name, next] of kinds) {
        const meter = await cpuMeter(pool, svc!.proc.pid!);
        const r = await concurrent(svc!, name, next, SECONDS);
        const cpu = await meter.stop();
        if (r.failures > 0) throw new Error(`${phase} ${name}: ${r.failures} failed requests`);
        const requests = r.rps * SECONDS;
        const perRequest = {
          serviceUs: Math.round((cpu.serviceMs * 1000) / requests),
          databaseUs: Math.round((cpu.databaseMs * 1000) / requests),
        };
        out[name] = { rps: r.rps, p50Ms: r.p50, p99Ms: r.p99, cpuUsPerRequest: perRequest };
        log(
          `  ${name}: ${r.rps} req/s, p50 ${r.p50} ms, p99 ${r.p99} ms; CPU per request: service ${perRequest.serviceUs} µs, database ${perRequest.databaseUs} µs`,
        );
      }
      out.sqlOnly = await sqlOnly();
      return out as Record<
        string,
        { rps: number; p50Ms: number; p99Ms: number; cpuUsPerRequest: { serviceUs: number; databaseUs: number } }
      > & { chunks: number };
    };

    const rounds: unknown[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      if (round > 1) await dropYear();
      const few = await measure(`round ${round}, few chunks`);
      await addYear();
      const year = await measure(`round ${round}, a year of daily chunks`);
      const cpu = (x: { cpuUsPerRequest: { serviceUs: number; databaseUs: number } }) =>
        x.cpuUsPerRequest.serviceUs + x.cpuUsPerRequest.databaseUs;
      const ratios = Object.fromEntries(
        kinds.map(([name]) => [
          name,
          {
            rps: +(year[name]!.rps / few[name]!.rps).toFixed(2),
            p99: +(year[name]!.p99Ms / few[name]!.p99Ms).toFixed(2),
            cpuPerRequest: +(cpu(year[name]!) / cpu(few[name]!)).toFixed(2),
          },
        ]),
      );
      log(`  round ${round}, year / few: ${JSON.stringify(ratios)}`);
      rounds.push({ few, year, yearOverFew: ratios });
    }
    results.rounds = rounds;
  } finally {
    await pool.end();
    await svc?.stop();
    await db.stop();
  }
  results.loadAverageAtEnd = os.loadavg()[0]!.toFixed(1);
  console.log(JSON.stringify(results, null, 2));
}

await main();
