// Aggregates from hourly rollups (sql/070_history_rollup.sql, docs/messaging.md §6): the answer
// is the rows' answer whether an hour comes from its rollup or from its rows; late rows are seen
// at once; only whole hours inside one bucket come from rollups. Whether a read used a rollup
// is shown by altering one rollup's maximum by hand: the answers that must come from it show
// the altered value, those that must come from the rows do not. Runs on the test database's
// layout (TimescaleDB with TEST_DATABASE_URL at port 5433).
import { beforeAll, describe, expect, it } from 'vitest';
import { forgetHorizon } from '../../src/history/horizon.js';
import { timescaleLayout } from '../helpers/history-layout.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';
import { getHistory } from './fixtures.js';

const svc = useService();
let tenant: string;
let token: string;
let device: string;
let series: string;

type Bucket = { ts: string } & Record<string, unknown>;
const get = (query: string) => getHistory<Bucket[]>(svc.base, token, device, query);
const at = (iso: string) => iso.replace('Z', '.000000Z');

// 2024-06-01 00:00 to 03:50 UTC, one value every 10 minutes: i = 0..23, value i.
const values = Array.from({ length: 24 }, (_, i) => ({
  ts: new Date(Date.parse('2024-06-01T00:00:00Z') + i * 600_000).toISOString(),
  v: i,
}));
const HOURLY = '?attr=temperature&interval=1h&agg=avg,min,max,sum,count&dateFrom=2024-06-01T00:00:00Z&dateTo=2024-06-01T03:59:59Z';
const expected = [0, 1, 2, 3].map((h) => {
  const vs = [0, 1, 2, 3, 4, 5].map((m) => h * 6 + m);
  return { ts: at(`2024-06-01T0${h}:00:00Z`), avg: h * 6 + 2.5, min: vs[0], max: vs[5], sum: vs.reduce((a, b) => a + b), count: 6 };
});

const dirtyHours = async () =>
  (
    await svc.service.pool.query<{ hour: Date }>('SELECT hour FROM history_rollup_dirty WHERE series = $1::bigint ORDER BY hour', [series])
  ).rows.map((r) => r.hour.toISOString());

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('rollup'));
  const pool = svc.service.pool;
  const t = await createTemplate(pool, tenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  device = await createDevice(pool, tenant, [t]);
  series = (await pool.query<{ s: string }>(`SELECT history_series($1, $2, 'temperature')::text AS s`, [tenant, device])).rows[0]!.s;
  // The service rolled up to the last whole hour at start: these rows are late, their hours marked.
  await svc.service.historyMaintenance.rollUp();
  await insertHistory(
    pool,
    values.map((x) => ({ tenant, device, attr: 'temperature', ts: x.ts, value: String(x.v) })),
  );
});

describe('hourly rollups', () => {
  it('late rows mark their hours and are read from the rows at once; a rollup pass computes them, and the answer stays the same', async () => {
    expect(await dirtyHours()).toEqual([
      '2024-06-01T00:00:00.000Z',
      '2024-06-01T01:00:00.000Z',
      '2024-06-01T02:00:00.000Z',
      '2024-06-01T03:00:00.000Z',
    ]);
    const before = await get(HOURLY);
    expect(before.status).toBe(200);
    expect(before.body).toEqual(expected);
    await svc.service.historyMaintenance.rollUp();
    expect(await dirtyHours()).toEqual([]);
    const { rows } = await svc.service.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM history_rollup WHERE series = $1::bigint AND tenant = $2 AND device_id = $3',
      [series, tenant, device],
    );
    expect(rows[0]!.n).toBe(4);
    expect((await get(HOURLY)).body).toEqual(expected);
  });

  describe('with the 01:00 rollup altered by hand (max 999)', () => {
    beforeAll(async () => {
      await svc.service.historyMaintenance.rollUp();
      await svc.service.pool.query(`UPDATE history_rollup SET hi = 999 WHERE series = $1::bigint AND hour = '2024-06-01T01:00:00Z'`, [
        series,
      ]);
    });

    const maxOf = async (query: string) => (await get(query)).body.map((b) => b.max);

    it('whole hours inside the range come from the rollups (hourly, 2-hourly and daily buckets)', async () => {
      expect(await maxOf(HOURLY.replace('avg,min,max,sum,count', 'max'))).toEqual([5, 999, 17, 23]);
      expect(await maxOf('?attr=temperature&interval=2h&agg=max&dateFrom=2024-06-01T00:00:00Z&dateTo=2024-06-01T03:59:59Z')).toEqual([
        999, 23,
      ]);
      expect(
        await maxOf('?attr=temperature&interval=1d&agg=max&tz=Europe/Berlin&dateFrom=2024-05-31T22:00:00Z&dateTo=2024-06-01T21:59:59Z'),
      ).toEqual([999]);
    });

    it('a partial hour, buckets inside an hour, a zone with a half-hour offset, and first/last are read from the rows', async () => {
      // dateFrom inside the hour: its rows only
      expect(await maxOf('?attr=temperature&interval=1h&agg=max&dateFrom=2024-06-01T01:05:00Z&dateTo=2024-06-01T01:59:59Z')).toEqual([11]);
      // dateTo inside the hour
      expect(await maxOf('?attr=temperature&interval=1h&agg=max&dateFrom=2024-06-01T01:00:00Z&dateTo=2024-06-01T01:45:00Z')).toEqual([10]);
      // 30-minute buckets
      expect(await maxOf('?attr=temperature&interval=30m&agg=max&dateFrom=2024-06-01T01:00:00Z&dateTo=2024-06-01T01:59:59Z')).toEqual([
        8, 11,
      ]);
      // Asia/Kolkata (UTC+5:30): days start at 18:30 UTC, inside an hour
      expect(
        await maxOf('?attr=temperature&interval=1d&agg=max&tz=Asia/Kolkata&dateFrom=2024-05-31T18:30:00Z&dateTo=2024-06-01T18:29:59Z'),
      ).toEqual([23]);
      // last is not in the rollups: the whole read goes to the rows
      const r = await get('?attr=temperature&interval=1h&agg=max,last&dateFrom=2024-06-01T01:00:00Z&dateTo=2024-06-01T01:59:59Z');
      expect(r.body).toEqual([{ ts: at('2024-06-01T01:00:00Z'), max: 11, last: 11 }]);
    });

    it('a late row in a rolled-up hour is counted at once (its hour read from the rows), and after the next pass from the rollup', async () => {
      await insertHistory(svc.service.pool, [{ tenant, device, attr: 'temperature', ts: '2024-06-01T02:15:00Z', value: '1000' }]);
      expect(await dirtyHours()).toEqual(['2024-06-01T02:00:00.000Z']);
      const now = await get(HOURLY.replace('avg,min,max,sum,count', 'max,count'));
      expect(now.body).toEqual([
        { ts: at('2024-06-01T00:00:00Z'), max: 5, count: 6 },
        { ts: at('2024-06-01T01:00:00Z'), max: 999, count: 6 },
        { ts: at('2024-06-01T02:00:00Z'), max: 1000, count: 7 },
        { ts: at('2024-06-01T03:00:00Z'), max: 23, count: 6 },
      ]);
      await svc.service.historyMaintenance.rollUp();
      expect(await dirtyHours()).toEqual([]);
      expect((await get(HOURLY.replace('avg,min,max,sum,count', 'max,count'))).body).toEqual(now.body);
    });

    it('fill=null adds the empty buckets around rolled-up ones', async () => {
      // dateTo is inclusive: the 01:00 hour is whole only up to its last microsecond
      const r = await get(
        '?attr=temperature&interval=1h&agg=max,count&fill=null&dateFrom=2024-05-31T23:00:00Z&dateTo=2024-06-01T01:59:59.999999Z',
      );
      expect(r.body).toEqual([
        { ts: at('2024-05-31T23:00:00Z'), max: null, count: 0 },
        { ts: at('2024-06-01T00:00:00Z'), max: 5, count: 6 },
        { ts: at('2024-06-01T01:00:00Z'), max: 999, count: 6 },
      ]);
      // ...and a second less is a partial hour, read from the rows
      const partial = await get('?attr=temperature&interval=1h&agg=max&dateFrom=2024-06-01T01:00:00Z&dateTo=2024-06-01T01:59:59Z');
      expect(partial.body).toEqual([{ ts: at('2024-06-01T01:00:00Z'), max: 11 }]);
    });
  });

  it('rolled up from scratch (history_rollup_rebuild, then a pass): every hour from the first row on, in steps, the answers unchanged', async () => {
    const pool = svc.service.pool;
    await pool.query('SELECT history_rollup_rebuild()');
    expect((await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM history_rollup')).rows[0]!.n).toBe(0);
    await svc.service.historyMaintenance.rollUp();
    const { rows } = await pool.query<{ hour: Date; hi: string; n: string }>(
      'SELECT hour, hi::text, n::text FROM history_rollup WHERE series = $1::bigint ORDER BY hour',
      [series],
    );
    // The altered maximum is gone (computed again from the rows), the late row's hour has 7 rows.
    expect(rows.map((r) => [r.hour.toISOString(), r.hi, r.n])).toEqual([
      ['2024-06-01T00:00:00.000Z', '5', '6'],
      ['2024-06-01T01:00:00.000Z', '11', '6'],
      ['2024-06-01T02:00:00.000Z', '1000', '7'],
      ['2024-06-01T03:00:00.000Z', '23', '6'],
    ]);
    const s = await pool.query<{ caught_up: boolean }>(
      `SELECT rolled_before = date_bin(interval '1 hour', now() - interval '5 minutes', timestamptz 'epoch') AS caught_up FROM history_settings`,
    );
    expect(s.rows[0]!.caught_up).toBe(true);
    const r = await get(HOURLY.replace('avg,min,max,sum,count', 'max,count'));
    expect(r.body).toEqual([
      { ts: at('2024-06-01T00:00:00Z'), max: 5, count: 6 },
      { ts: at('2024-06-01T01:00:00Z'), max: 11, count: 6 },
      { ts: at('2024-06-01T02:00:00Z'), max: 1000, count: 7 },
      { ts: at('2024-06-01T03:00:00Z'), max: 23, count: 6 },
    ]);
  });

  it('chunks dropped before their rollups are forgotten (TimescaleDB retention runs on its own schedule): no bucket of theirs is answered', async () => {
    const pool = svc.service.pool;
    if (await timescaleLayout()) await pool.query(`SELECT drop_chunks('history', older_than => timestamptz '2024-06-02')`);
    else {
      const { rows } = await pool.query<{ name: string }>(
        `SELECT name FROM history_partitions WHERE range_end <= timestamptz '2024-06-02'`,
      );
      for (const { name } of rows) await pool.query(`DROP TABLE "${name}"`);
      await pool.query(`DELETE FROM history_partitions WHERE range_end <= timestamptz '2024-06-02'`);
    }
    expect(
      (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM history_rollup WHERE series = $1::bigint', [series])).rows[0]!.n,
    ).toBe(4);
    forgetHorizon(pool); // (the service reads where the oldest chunk starts every 5 s)
    expect((await get(HOURLY)).body).toEqual([]);
    expect((await get(HOURLY.replace('interval=1h', 'interval=1d'))).body).toEqual([]);
    // The maintenance pass then forgets those rollups (the hours before the oldest chunk).
    expect((await pool.query<{ n: string }>('SELECT history_rollup_forget_expired()::text AS n')).rows[0]!.n).toBe('4');
    expect(
      (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM history_rollup WHERE series = $1::bigint', [series])).rows[0]!.n,
    ).toBe(0);
  });
});

describe('computing marked hours again', () => {
  it('reads the rows of the marked hours only, not every partition: each hour by an index range scan of its own partition', async () => {
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'sensor', [{ label: 'level', type: 'dynamic', value_type: 'integer' }]);
    const d = await createDevice(pool, tenant, [t]);
    // One value a day over 60 days of 2022 (60 daily partitions or chunks), rolled up.
    const day = (i: number, minute = 0) => new Date(Date.parse('2022-03-01T10:00:00Z') + i * 86_400_000 + minute * 60_000).toISOString();
    await insertHistory(
      pool,
      Array.from({ length: 60 }, (_, i) => ({ tenant, device: d, attr: 'level', ts: day(i), value: String(i) })),
    );
    await svc.service.historyMaintenance.rollUp();
    // Three late values mark three of those hours.
    await insertHistory(
      pool,
      [5, 30, 55].map((i) => ({ tenant, device: d, attr: 'level', ts: day(i, 30), value: '1000' })),
    );
    const client = await pool.connect();
    try {
      // Sequential scans of history's partitions (chunks), counted in this transaction (the
      // view also holds counts of earlier ones not yet reported: the difference is the refresh's).
      const scans = async () =>
        (
          await client.query<{ parts: number; scans: number }>(
            `SELECT count(*)::int AS parts, coalesce(sum(s.seq_scan), 0)::int AS scans
               FROM pg_inherits i LEFT JOIN pg_stat_xact_user_tables s ON s.relid = i.inhrelid
              WHERE i.inhparent = 'history'::regclass`,
          )
        ).rows[0]!;
      await client.query('BEGIN');
      const before = await scans();
      expect((await client.query<{ n: number }>('SELECT history_rollup_refresh(1000) AS n')).rows[0]!.n).toBe(3);
      const after = await scans();
      expect(after.parts).toBeGreaterThanOrEqual(60);
      // Every partition once when the hours were joined with the whole table (a hash join on the series).
      expect(after.scans - before.scans).toBeLessThanOrEqual(3);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const series = (await pool.query<{ s: string }>(`SELECT history_series($1, $2, 'level')::text AS s`, [tenant, d])).rows[0]!.s;
    const { rows } = await pool.query<{ hour: Date; n: string; hi: string }>(
      'SELECT hour, n::text, hi::text FROM history_rollup WHERE series = $1::bigint AND hi = 1000 ORDER BY hour',
      [series],
    );
    expect(rows.map((r) => [r.hour.toISOString(), r.n])).toEqual([
      [day(5), '2'],
      [day(30), '2'],
      [day(55), '2'],
    ]);
  });
});
