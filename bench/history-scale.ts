// lastN at scale while ingest runs (issue 20): BENCH_ROWS (100 million) values of BENCH_DEVICES
// (10,000) devices x 3 attributes spread over the last BENCH_DAYS (7) days in chunks of
// BENCH_CHUNK_INTERVAL (1 day),
// on either layout (BENCH_DATABASE_URL as in bench/history-chunks.ts; on TimescaleDB the chunks
// older than two intervals are compressed, as the compression policy would have done), then:
//   idle:    GET ...?lastN=10&attr=<a> of random devices, one client, BENCH_SECONDS (30): back to
//            back (a closed loop: the reader itself keeps a core busy), then paced at one request
//            every BENCH_LASTN_PACE_MS (10: 100 a second, many dashboards' worth);
//   ingest:  both again while the MQTT load generator (bench/ingest-load.ts, the devices above,
//            3 values a message) publishes BENCH_INGEST_RATE msg/s through BENCH_MQTT_URL
//            (mqtt://127.0.0.1:1883) into the service: set it to 80 % of the sustainable rate
//            bench/ingest.js measured on the machine; 0 skips this phase.
//   aggregate (BENCH_AGGREGATE, on unless 0; issue 22): 24 hourly avg,min,max of one day of
//            1 Hz values (86,400 rows added to device 0), idle and while ingest runs, one
//            client paced at one request every BENCH_AGGREGATE_PACE_MS (250; a dashboard),
//            then back to back (a closed loop, which the read gate holds on a saturated host).
// Reported: p50 / p99 / max of lastN and of the floors beside it (GET /health/live: no database; GET /health: one round trip), the ingest rate offered, acknowledged and stored
// (history rows a second), and the database's shared_buffers against the current chunk's index.
// The values are written set-based before the service starts (history_reopen(): no per-row
// trigger), and the service's first pass writes the series' spans in one GROUP BY.
//   npm run build && BENCH_ROWS=3000000 BENCH_INGEST_RATE=4000 node dist/bench/history-scale.js
// The full-size run needs a quiet machine and ~30 GB of disk: docs/operations.md §6. With
// BENCH_HOLD_FILE set, the benchmark waits after loading until that file exists, so the
// measurements start when the machine has been made quiet (the load takes half an hour); a
// number written in it replaces BENCH_INGEST_RATE (the top rate can be measured meanwhile).
import fs from 'node:fs';
import os from 'node:os';
import pg from 'pg';
import { externalBrokerService } from './lib/harness.js';
import { generator } from './lib/load-generator.js';
import {
  ATTRS,
  deviceId,
  isTimescale,
  log,
  openDatabase,
  openRegionReady,
  prepareSchema,
  seedDevices,
  seedValues,
  sequential,
  sleep,
  startService,
  tenant,
  type BenchService,
} from './lib/history-bench.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 100_000_000);
const DEVICES = Number(process.env.BENCH_DEVICES ?? 10_000);
const DAYS = Number(process.env.BENCH_DAYS ?? 7);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 30);
let INGEST_RATE = Number(process.env.BENCH_INGEST_RATE ?? 0);
const MQTT_URL = process.env.BENCH_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const CHUNK_INTERVAL = process.env.BENCH_CHUNK_INTERVAL ?? '1 day';
const AGGREGATE = process.env.BENCH_AGGREGATE !== '0';
const AGG_PACE_MS = Number(process.env.BENCH_AGGREGATE_PACE_MS ?? 250);
const LASTN_PACE_MS = Number(process.env.BENCH_LASTN_PACE_MS ?? 10);

async function main(): Promise<void> {
  const db = await openDatabase();
  const results: Record<string, unknown> = {
    machine: `${os.cpus().length} cores (${os.cpus()[0]?.model}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load average at start ${os.loadavg()[0]!.toFixed(1)}`,
    database: db.server,
  };
  let svc: BenchService | undefined;
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  const broker = externalBrokerService(MQTT_URL, 'bench-scale');
  const serviceEnv = {
    ...broker.env,
    MQTT_SESSION_EXPIRY_SECONDS: '60',
    HISTORY_CHUNK_INTERVAL: CHUNK_INTERVAL,
  };
  try {
    await prepareSchema(db.url, pool, serviceEnv);
    const timescale = await isTimescale(pool);
    results.layout = `${timescale ? 'TimescaleDB hypertable, chunks older than 2 intervals compressed' : 'plain PostgreSQL partitions'}, chunks of ${CHUNK_INTERVAL}`;
    const perSeries = Math.ceil(ROWS / (DEVICES * ATTRS.length));
    const stepSeconds = (DAYS * 86400) / perSeries;
    log(
      `writing ${(DEVICES * ATTRS.length * perSeries).toLocaleString('en')} values (${DEVICES} devices x ${ATTRS.length} x ${perSeries}, one every ${stepSeconds.toFixed(1)} s over ${DAYS} days)`,
    );
    await seedDevices(pool, DEVICES);
    const t0 = performance.now();
    await seedValues(pool, {
      devices: DEVICES,
      perSeries,
      stepSeconds,
      endMs: Date.now(),
      slice: Math.max(1, Math.floor(2_000_000 / (ATTRS.length * perSeries))),
    });
    results.loadSeconds = Math.round((performance.now() - t0) / 1000);
    // The aggregate of issue 22: one day (yesterday, UTC) of 1 Hz values of device 0's first
    // attribute, beside its own sparse values; rolled up by the service's first pass.
    const aggDay = new Date(Math.floor(Date.now() / 86_400_000) * 86_400_000 - 86_400_000);
    if (AGGREGATE) {
      await pool.query(
        `INSERT INTO history (tenant, device_id, attr, series, ts, value)
         SELECT $1, $2, $3, history_series($1, $2, $3), $4::timestamptz + i * interval '1 second', round((20 + random() * 5)::numeric, 2)::text
           FROM generate_series(0, 86399) i`,
        [tenant, deviceId(0), ATTRS[0], aggDay.toISOString()],
      );
    }
    log('VACUUM ANALYZE');
    await pool.query('VACUUM ANALYZE history');
    if (timescale) {
      log('compressing the chunks older than two intervals');
      await pool.query(
        `SELECT count(compress_chunk(c, if_not_compressed => true)) FROM history_settings s, show_chunks('history', older_than => now() - 2 * s.chunk_interval) c`,
      );
    }
    results.storedValues = Number((await pool.query<{ count: string }>('SELECT count(*) FROM history')).rows[0]!.count);
    results.chunks = (
      await pool.query(
        `SELECT to_char(range_start, 'MM-DD') AS day, pg_size_pretty(index_bytes) AS index FROM history_chunk_sizes() WHERE index_bytes > 16384 ORDER BY range_start`,
      )
    ).rows;
    results.sharedBuffers = (await pool.query<{ s: string }>(`SELECT current_setting('shared_buffers') AS s`)).rows[0]!.s;

    const hold = process.env.BENCH_HOLD_FILE;
    if (hold) {
      log(`loaded; waiting for ${hold} to exist before measuring`);
      while (!fs.existsSync(hold)) await sleep(1000);
      const rate = Number(fs.readFileSync(hold, 'utf8').trim());
      if (rate > 0) INGEST_RATE = rate;
    }
    svc = await startService(db.url, serviceEnv);
    log('waiting for the service to write the spans (first pass)');
    results.spansSeconds = await openRegionReady(pool);

    const lastN = () =>
      `/history/device/${deviceId(Math.floor(Math.random() * DEVICES))}/history?lastN=10&attr=${ATTRS[Math.floor(Math.random() * ATTRS.length)]}`;
    await sequential(svc, lastN, 5); // warm-up
    log(`lastN=10, idle, ${SECONDS} s`);
    results.idle = await sequential(svc, lastN, SECONDS);
    log(`  ${JSON.stringify(results.idle)}`);
    log(`lastN=10, idle, one request every ${LASTN_PACE_MS} ms, ${SECONDS} s`);
    results.idlePaced = await sequential(svc, lastN, SECONDS, LASTN_PACE_MS);
    log(`  ${JSON.stringify(results.idlePaced)}`);
    // The floors, in the same closed loop: an answer without the database (GET /health/live),
    // and one with a single round trip to it (GET /health: SELECT 1). What lastN costs beyond
    // the second is the read's own work; the second beyond the first is one database round trip.
    const floor = () => '/health/live';
    const roundTrip = () => '/health';
    log(`the floors (GET /health/live; GET /health), idle, ${SECONDS} s each`);
    results.floorIdle = { noDatabase: await sequential(svc, floor, SECONDS), oneRoundTrip: await sequential(svc, roundTrip, SECONDS) };
    log(`  ${JSON.stringify(results.floorIdle)}`);
    const aggregate = () =>
      `/history/device/${deviceId(0)}/history?attr=${ATTRS[0]}&interval=1h&agg=avg,min,max&dateFrom=${aggDay.toISOString()}&dateTo=${new Date(aggDay.getTime() + 86_400_000 - 1).toISOString()}`;
    const aggregates = async (phase: string) => {
      log(`24 hourly avg,min,max of a 1 Hz day, ${phase}: one request every ${AGG_PACE_MS} ms, then back to back, ${SECONDS} s each`);
      const out = {
        paced: await sequential(svc!, aggregate, SECONDS, AGG_PACE_MS),
        backToBack: await sequential(svc!, aggregate, SECONDS),
      };
      log(`  ${JSON.stringify(out)}`);
      return out;
    };
    if (AGGREGATE) results.aggregateIdle = await aggregates('idle');

    if (INGEST_RATE > 0) {
      const gen = generator({
        url: MQTT_URL,
        tenant,
        devices: { from: 0, count: DEVICES },
        devicesPerConnection: 1,
        rate: INGEST_RATE,
        window: 4,
        connectConcurrency: 200,
      });
      await gen.ready;
      log(`ingest at ${INGEST_RATE} msg/s: settling 10 s`);
      await sleep(10_000);
      // Rows inserted into history's chunks, from the statistics (a count would scan the current chunk).
      const inserted = async () => {
        await sleep(1100); // statistics reach the shared counters within a second
        const { rows } = await pool.query<{ n: string }>(
          `SELECT coalesce(sum(n_tup_ins), 0)::int8::text AS n FROM pg_stat_user_tables s JOIN pg_inherits i ON i.inhrelid = s.relid WHERE i.inhparent = 'history'::regclass`,
        );
        return Number(rows[0]!.n);
      };
      const rows0 = await inserted();
      const acked0 = gen.latest()?.acked ?? 0;
      const t2 = performance.now();
      log(`lastN=10 while ingest runs, ${SECONDS} s`);
      const during = await sequential(svc, lastN, SECONDS);
      log(`  ${JSON.stringify(during)}`);
      log(`lastN=10 while ingest runs, one request every ${LASTN_PACE_MS} ms, ${SECONDS} s`);
      const duringPaced = await sequential(svc, lastN, SECONDS, LASTN_PACE_MS);
      log(`  ${JSON.stringify(duringPaced)}`);
      log(`the floors (GET /health/live; GET /health) while ingest runs, ${SECONDS} s each`);
      const floorDuring = { noDatabase: await sequential(svc, floor, SECONDS), oneRoundTrip: await sequential(svc, roundTrip, SECONDS) };
      log(`  ${JSON.stringify(floorDuring)}`);
      const rows1 = await inserted();
      const secs = (performance.now() - t2) / 1000;
      const acked = Math.round(((gen.latest()?.acked ?? 0) - acked0) / secs);
      if (AGGREGATE) {
        const acked1 = gen.latest()?.acked ?? 0;
        const t3 = performance.now();
        results.aggregateDuringIngest = {
          ...(await aggregates('while ingest runs')),
          ackedMsgPerSecond: Math.round(((gen.latest()?.acked ?? 0) - acked1) / ((performance.now() - t3) / 1000)),
        };
      }
      await gen.stop();
      results.duringIngest = {
        ...during,
        paced: duringPaced,
        floor: floorDuring,
        offeredMsgPerSecond: INGEST_RATE,
        ackedMsgPerSecond: acked,
        storedValuesPerSecond: Math.round((rows1 - rows0) / secs),
      };
      log(`  ${JSON.stringify(results.duringIngest)}`);
      results.currentChunkIndex = (
        await pool.query<{ s: string }>(
          `SELECT pg_size_pretty(index_bytes) AS s FROM history_chunk_sizes() WHERE now() >= range_start AND now() < range_end`,
        )
      ).rows[0]?.s;
    }
  } finally {
    await pool.end();
    await svc?.stop();
    await broker.endSessions();
    await db.stop();
  }
  results.loadAverageAtEnd = os.loadavg()[0]!.toFixed(1);
  console.log(JSON.stringify(results, null, 2));
}

await main();
