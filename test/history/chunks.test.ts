// History reads as the table ages (sql/022_history_closed_spans.sql, docs/messaging.md §6):
// every query answers exactly what one plain SQL query over the whole table answers, whether
// its rows lie in the open region, before the horizon (found through the series' spans), arrive
// late into closed chunks, or (TimescaleDB) sit in compressed chunks; and each statement of a
// read plans only the chunks of its range, with a year of daily chunks in the table.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forgetHorizon } from '../../src/history/horizon.js';
import type { HistoryQuery } from '../../src/history/query.js';
import { openLimit, readOneSeriesOfDevice, readSeries } from '../../src/history/repo.js';
import { latestValues } from '../../src/history/latest.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { timescaleLayout, timescaleLicense, timescaleOnly } from '../helpers/history-layout.js';
import { http, useService, type TestService } from '../helpers/service.js';

/** The part of an EXPLAIN (FORMAT JSON) node these tests read. */
interface PlanNode {
  'Relation Name'?: string;
  'Subplans Removed'?: number;
  'Chunks excluded during startup'?: number;
  Plans?: PlanNode[];
}

const TIMESCALE = await timescaleLayout();
// Compression: TimescaleDB's community build only (the Apache-only build has none).
const COMPRESSION = TIMESCALE && (await timescaleLicense()) !== 'apache';
if (TIMESCALE && !COMPRESSION)
  process.stdout.write('[chunks.test.ts] compression check NOT RUN: the Apache-only build of TimescaleDB has no compression\n');
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** `ms` as timestamptz text with a microsecond part, so precision is checked too. */
const at = (ms: number, micro = 0) => `${new Date(ms).toISOString().slice(0, 23)}${String(micro).padStart(3, '0')}Z`;

/** Moves the open region's start to `t` as the maintenance does (note, then close), and makes the service read it. */
async function closeBefore(s: TestService, t: string): Promise<void> {
  await s.service.pool.query('SELECT history_note_before($1::timestamptz)', [t]);
  await s.service.pool.query('SELECT history_close_before($1::timestamptz)', [t]);
  forgetHorizon(s.service.pool);
}

/** Waits for the service's first move of the open region (at start, not waited for) and makes reads use it. */
async function openRegionSet(s: TestService): Promise<void> {
  for (let i = 0; ; i++) {
    const { rows } = await s.service.pool.query<{ set: boolean }>(`SELECT closed_before > '-infinity' AS set FROM history_settings`);
    if (rows[0]!.set) break;
    if (i > 200) throw new Error('the service did not move the open region at start');
    await new Promise((r) => setTimeout(r, 50));
  }
  forgetHorizon(s.service.pool);
}

describe('every query answers the same wherever its rows are', () => {
  const svc = useService({ HISTORY_MAX_RESULTS: '500' });
  let token: string;
  let tenant: string;
  let device: string;
  let other: string;
  const now = Date.now();
  const LABELS = ['a', 'b', 'c', 'd'];

  beforeAll(async () => {
    ({ tenant, token } = await svc.freshTenant('chk'));
    const pool = svc.service.pool;
    const t = await createTemplate(
      pool,
      tenant,
      'sensor',
      LABELS.map((label) => ({ label, type: 'dynamic', value_type: 'float' })),
    );
    device = await createDevice(pool, tenant, [t]);
    other = await createDevice(pool, tenant, [t]);
    const rows: Array<{ tenant: string; device: string; attr: string; ts: string; value: string }> = [];
    let n = 0;
    // a: every 6 hours for 40 days, up to 2 hours ahead (a future chunk); the other device interleaved.
    for (let ms = now - 40 * DAY; ms <= now + 2 * HOUR; ms += 6 * HOUR) {
      rows.push({ tenant, device, attr: 'a', ts: at(ms, n % 1000), value: String(n++) });
      rows.push({ tenant, device: other, attr: 'a', ts: at(ms + HOUR), value: String(-n) });
    }
    // b: silent for 20 days: every 3 hours from 30 to 20 days ago.
    for (let ms = now - 30 * DAY; ms <= now - 20 * DAY; ms += 3 * HOUR)
      rows.push({ tenant, device, attr: 'b', ts: at(ms, 7), value: String(n++) });
    // c: nothing. d: sparse, far apart (many empty chunks between its rows).
    for (const ago of [200, 120, 45, 3]) rows.push({ tenant, device, attr: 'd', ts: at(now - ago * DAY), value: `${n++}.5` });
    await insertHistory(pool, rows);
  });

  /** One series as one SQL query over the whole table: the answer every read must give. */
  async function expected(label: string, q: { order: 'asc' | 'desc'; limit: number; from?: string; to?: string }) {
    const { rows } = await svc.service.pool.query<{ ts: string; value: string }>(
      `SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS ts, value FROM history
        WHERE tenant = $1 AND device_id = $2 AND attr = $3 AND ($4::timestamptz IS NULL OR ts >= $4) AND ($5::timestamptz IS NULL OR ts <= $5)
        ORDER BY ts ${q.order} LIMIT $6`,
      [tenant, device, label, q.from ?? null, q.to ?? null, q.limit],
    );
    return rows.map((r) => ({ device_id: device, ts: r.ts, value: JSON.parse(r.value) as unknown, attr: label }));
  }

  /** Every operator combination, for one label, several and all. */
  async function checkAll(): Promise<number> {
    const ranges: Array<{ from?: string; to?: string }> = [
      {},
      { from: at(now - 35 * DAY), to: at(now - 25 * DAY) },
      { from: at(now - 25 * DAY), to: at(now) },
      { from: at(now - 2 * HOUR), to: at(now + 3 * HOUR) },
      { from: at(now - 300 * DAY), to: at(now - 250 * DAY) },
      { from: at(now - 22 * DAY) },
      { to: at(now - 22 * DAY) },
      { from: at(now - 26 * HOUR), to: at(now - 20 * HOUR) },
    ];
    const counts: Array<{ op?: 'lastN' | 'firstN'; n?: number }> = [
      {},
      { op: 'lastN', n: 1 },
      { op: 'lastN', n: 7 },
      { op: 'lastN', n: 60 },
      { op: 'firstN', n: 1 },
      { op: 'firstN', n: 7 },
      { op: 'firstN', n: 60 },
      { op: 'lastN', n: 400 },
    ];
    let checked = 0;
    for (const r of ranges) {
      for (const c of counts) {
        const q = { order: c.op === 'firstN' ? ('asc' as const) : ('desc' as const), limit: c.n ?? 500, from: r.from, to: r.to };
        const params = new URLSearchParams();
        if (c.op) params.set(c.op, String(c.n));
        if (r.from) params.set('dateFrom', r.from);
        if (r.to) params.set('dateTo', r.to);
        const want: Record<string, unknown[]> = {};
        for (const label of LABELS) want[label] = await expected(label, q);
        for (const label of LABELS) {
          const res = await http('GET', `${svc.base}/history/device/${device}/history?${params.toString()}&attr=${label}`, { token });
          expect(res.status).toBe(200);
          expect(res.body, `attr=${label}&${params.toString()}`).toEqual(want[label]);
        }
        const several = await http('GET', `${svc.base}/history/device/${device}/history?${params.toString()}&attr=d,b,a`, { token });
        expect(several.body, `attr=d,b,a&${params.toString()}`).toEqual({ d: want.d, b: want.b, a: want.a });
        const all = await http('GET', `${svc.base}/history/device/${device}/history?${params.toString()}`, { token });
        expect(all.body, `no attr, ${params.toString()}`).toEqual(want);
        checked += LABELS.length + 2;
      }
    }
    return checked;
  }

  it('with the open region the service set at start (rows before it were noted as they came)', async () => {
    await openRegionSet(svc);
    const { rows } = await svc.service.pool.query<{ closed_before: Date; noted_before: Date }>(
      `SELECT closed_before, noted_before FROM history_settings`,
    );
    // The start of the previous chunk (daily chunks aligned to the epoch).
    expect(rows[0]!.closed_before.getTime()).toBe(Math.floor(now / DAY) * DAY - DAY);
    expect(rows[0]!.noted_before.getTime()).toBe(rows[0]!.closed_before.getTime());
    expect(await checkAll()).toBeGreaterThan(300);
  });

  it('after the horizon moved past rows written before it (their spans come from the rows themselves)', async () => {
    await closeBefore(svc, at(now - HOUR));
    const span = await svc.service.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM history_series_span`);
    expect(span.rows[0]!.n).toBeGreaterThanOrEqual(4);
    await checkAll();
  });

  it('after late rows arrived before the horizon: a new first value, a value inside a gap, a first value of an empty series', async () => {
    await insertHistory(svc.service.pool, [
      { tenant, device, attr: 'a', ts: at(now - 100 * DAY, 1), value: '1000' },
      { tenant, device, attr: 'b', ts: at(now - 25 * DAY + 30 * 60_000), value: '1001' },
      { tenant, device, attr: 'c', ts: at(now - 15 * DAY), value: '1002' },
      { tenant, device, attr: 'd', ts: at(now - 60 * DAY), value: '1003' },
    ]);
    await checkAll();
  });

  it.skipIf(!COMPRESSION)(
    `with every chunk compressed, and a row written into a compressed chunk afterwards ${TIMESCALE && !COMPRESSION ? '(TimescaleDB community build only: NOT RUN, the Apache-only build has no compression)' : timescaleOnly('chunks.test.ts', TIMESCALE)}`,
    async () => {
      const pool = svc.service.pool;
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(compress_chunk(c, if_not_compressed => true))::int AS n FROM show_chunks('history') c`,
      );
      expect(rows[0]!.n).toBeGreaterThan(10);
      const compressed = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM timescaledb_information.chunks WHERE hypertable_name = 'history' AND NOT is_compressed`,
      );
      expect(compressed.rows[0]!.n).toBe(0);
      await checkAll();
      await insertHistory(pool, [
        { tenant, device, attr: 'b', ts: at(now - 26 * DAY), value: '2001' },
        { tenant, device, attr: 'a', ts: at(now - 150 * DAY), value: '2002' },
      ]);
      await checkAll();
    },
    120_000,
  );
});

describe('each statement of a read plans only the chunks of its range (a year of daily chunks)', () => {
  const svc = useService();
  const tenant = `pln${crypto.randomBytes(3).toString('hex')}`;
  let device: string;
  let admin: pg.Client;
  const now = Date.now();

  beforeAll(async () => {
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'sensor', [
      { label: 'a', type: 'dynamic', value_type: 'float' },
      { label: 'b', type: 'dynamic', value_type: 'float' },
    ]);
    device = await createDevice(pool, tenant, [t]);
    // A year of daily chunks, each with a row of another series (TimescaleDB creates chunks
    // for rows only), then three days of this device's values every hour, and old ones for b.
    await pool.query(`SELECT history_ensure_partition(now() - g * interval '1 day') FROM generate_series(0, 365) g`);
    await pool.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT 'x', 'x', 'x', history_series('x', 'x', 'x'), now() - g * interval '1 day', '0' FROM generate_series(0, 365) g`,
    );
    const rows = [];
    for (let ms = now - 3 * DAY; ms <= now; ms += HOUR) rows.push({ tenant, device, attr: 'a', ts: at(ms), value: '1' });
    for (let ms = now - 200 * DAY; ms <= now - 190 * DAY; ms += 6 * HOUR) rows.push({ tenant, device, attr: 'b', ts: at(ms), value: '2' });
    await insertHistory(pool, rows);
    await openRegionSet(svc);
    await pool.query('ANALYZE history');
    admin = new pg.Client({ connectionString: svc.env.DATABASE_URL });
    await admin.connect();
  }, 120_000);
  afterAll(() => admin?.end());

  /** The chunks a plan holds: scans of history's chunks, plus those pruned only at execution. */
  function chunksIn(plan: PlanNode): string[] {
    const out: string[] = [];
    const walk = (node: PlanNode) => {
      const rel = node['Relation Name'];
      if (rel && /^(history_\d|_hyper_|compress_hyper_)/.test(rel)) out.push(rel);
      const late = (node['Subplans Removed'] ?? 0) + (node['Chunks excluded during startup'] ?? 0);
      for (let i = 0; i < late; i++) out.push('(pruned at execution)');
      for (const child of node.Plans ?? []) walk(child);
    };
    walk(plan);
    return out;
  }

  /** Runs a read through a pool that records its statements, then plans each as PostgreSQL does. */
  async function plannedChunks(read: (pool: pg.Pool) => Promise<unknown>): Promise<number[]> {
    const seen: Array<{ name?: string; text: string; values: unknown[] }> = [];
    const pool = svc.service.pool;
    const recording = new Proxy(pool, {
      get(target, prop, receiver) {
        if (prop !== 'query') return Reflect.get(target, prop, receiver) as unknown;
        return (config: { name?: string; text: string; values: unknown[] }) => {
          seen.push(config);
          return target.query(config as never);
        };
      },
    });
    await read(recording);
    const counts: number[] = [];
    for (const s of seen.filter((x) => /FROM history\b/.test(x.text))) {
      // Named statements are prepared and reused (a generic plan, parameters unknown); unnamed
      // ones are planned with their values.
      await admin.query(`SET plan_cache_mode = ${s.name ? 'force_generic_plan' : 'force_custom_plan'}`);
      const { rows } = await admin.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>({
        text: `EXPLAIN (FORMAT JSON) ${s.text}`,
        values: s.values,
      });
      counts.push(chunksIn(rows[0]!['QUERY PLAN'][0]!.Plan).length);
    }
    return counts;
  }

  const q = (over: Partial<HistoryQuery>): HistoryQuery => ({
    attrs: undefined,
    single: true,
    order: 'desc',
    limit: 10,
    from: undefined,
    to: undefined,
    fromUs: undefined,
    toUs: undefined,
    ...over,
  });
  const range = (fromMs: number, toMs: number) => ({ from: at(fromMs), to: at(toMs), fromUs: fromMs * 1000, toUs: toMs * 1000 });

  it('the table has a year of chunks', async () => {
    const { rows } = await svc.service.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM history_chunk_sizes()');
    expect(rows[0]!.n).toBeGreaterThan(360);
  });

  it('lastN of a series written now: one statement with the open chunks only', async () => {
    const counts = await plannedChunks((pool) => readOneSeriesOfDevice(pool, tenant, device, 'a', q({ limit: 10 })));
    expect(counts).toHaveLength(1);
    expect(counts[0]).toBeGreaterThan(0);
    expect(counts[0]).toBeLessThanOrEqual(5);
  });

  it('lastN reaching before the horizon, and firstN: the open chunks, then a window or two of a few chunks', async () => {
    for (const query of [q({ limit: 60 }), q({ order: 'asc', limit: 10 }), q({ order: 'asc', limit: 60 })]) {
      const counts = await plannedChunks((pool) => readOneSeriesOfDevice(pool, tenant, device, 'a', query));
      expect(counts.length).toBeLessThanOrEqual(4);
      for (const n of counts) expect(n).toBeLessThanOrEqual(5);
    }
  });

  it('a series silent for half a year: its span leads the walk straight to its chunks', async () => {
    for (const query of [q({ limit: 10 }), q({ order: 'asc', limit: 10 }), q({ limit: 0 + 1000 })]) {
      const counts = await plannedChunks((pool) => readOneSeriesOfDevice(pool, tenant, device, 'b', query));
      expect(counts.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(5 + 12);
      expect(counts.length).toBeLessThanOrEqual(5);
    }
  });

  it("the open region's statements are planned once and reused (generic plans), whatever the limit asked", async () => {
    const one = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 1 });
    try {
      for (let i = 0; i < 20; i++) {
        await readOneSeriesOfDevice(one, tenant, device, 'a', q({ limit: 9 + (i % 3) }));
        await readSeries(one, tenant, device, ['a', 'b'], q({ limit: 10, single: false }));
      }
      const { rows } = await one.query<{ name: string; generic: number; custom: number }>(
        `SELECT name, generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE name LIKE 'history-%' AND name <> 'history-horizon'`,
      );
      expect(rows.length).toBeGreaterThanOrEqual(2);
      // PostgreSQL plans the first five executions for their values, then keeps the generic plan if it is no dearer.
      for (const r of rows) expect(r, r.name).toMatchObject({ generic: 15, custom: 5 });
    } finally {
      await one.end();
    }
  });

  it("the open region's LIMIT: the limit rounded up to 1, 2, 3, 4, 6, 8, 12, 16..., never more than 1.5 times it", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 100, 10_000].map(openLimit)).toEqual([
      1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 16, 128, 12_288,
    ]);
    for (let n = 1; n < 5000; n++) {
      expect(openLimit(n)).toBeGreaterThanOrEqual(n);
      expect(openLimit(n)).toBeLessThanOrEqual(Math.max(2, 1.5 * n));
    }
    expect(new Set(Array.from({ length: 10_000 }, (_, i) => openLimit(i + 1))).size).toBeLessThanOrEqual(30);
  });

  it("the latest values (POST /history/latest, lastValues): the open chunks, then only the chunk of a silent series' last row", async () => {
    const counts = await plannedChunks((pool) => latestValues(pool, tenant, { devices: [device] }, undefined));
    expect(counts).toHaveLength(2);
    expect(counts[0]).toBeLessThanOrEqual(5);
    expect(counts[1]).toBeLessThanOrEqual(2);
    const rows = await latestValues(svc.service.pool, tenant, { devices: [device] }, undefined);
    expect(rows.map((r) => [r.attr, r.value])).toEqual([
      ['a', '1'],
      ['b', '2'],
    ]);
  });

  it("after retention dropped the oldest chunks: firstN starts at the oldest chunk left, not at the span's start", async () => {
    // Series x has a row a day for a year; its span still starts a year ago once the chunks
    // older than 100 days are gone (retention, by hand here as the service or TimescaleDB does it).
    const pool = svc.service.pool;
    if (await timescaleLayout()) await pool.query(`SELECT drop_chunks('history', older_than => now() - interval '100 days')`);
    else await pool.query('SELECT history_apply_retention(100)');
    const query = q({ order: 'asc', limit: 1, single: false });
    const counts = await plannedChunks((p) => readSeries(p, 'x', 'x', ['x'], query));
    expect(counts.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(5 + 8);
    const [first] = await readSeries(pool, 'x', 'x', ['x'], query);
    expect(Date.parse(first!.ts)).toBeGreaterThan(now - 101 * DAY);
    expect(Date.parse(first!.ts)).toBeLessThan(now - 98 * DAY);
  });

  it('date ranges: only the chunks of the range', async () => {
    const counts = await plannedChunks((pool) =>
      readOneSeriesOfDevice(pool, tenant, device, 'b', q({ limit: 1000, ...range(now - 195 * DAY, now - 193 * DAY) })),
    );
    // The open chunks' statement (pruned at execution) and windows inside the 2-3 days of the range.
    expect(counts.slice(1).reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(4);
    const several = await plannedChunks((pool) =>
      readSeries(pool, tenant, device, ['a', 'b'], q({ limit: 1000, single: false, ...range(now - 2 * DAY, now) })),
    );
    for (const n of several) expect(n).toBeLessThanOrEqual(5);
  });
});

describe('a read of more rows before the horizon than a call takes arguments', () => {
  const svc = useService({ HISTORY_MAX_RESULTS: '200000' });

  it('lastN and firstN of 150,000 rows: every row, in order (no 500)', async () => {
    const { tenant, token } = await svc.freshTenant('many');
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'sensor', [{ label: 'a', type: 'dynamic', value_type: 'float' }]);
    const device = await createDevice(pool, tenant, [t]);
    await openRegionSet(svc);
    // A second apart, five days ago: in closed chunks, read window by window (readClosed).
    const first = Math.floor(Date.now() / 1000) * 1000 - 5 * DAY;
    await pool.query(`SELECT history_ensure_partition(to_timestamp($1 / 1000.0) + d * interval '1 day') FROM generate_series(0, 2) d`, [
      first,
    ]);
    await pool.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT $1, $2, 'a', history_series($1, $2, 'a'), to_timestamp($3 / 1000.0) + g * interval '1 second', g::text
         FROM generate_series(0, 149999) g`,
      [tenant, device, first],
    );
    for (const op of ['lastN', 'firstN'] as const) {
      const res = await http<Array<{ value: number }>>('GET', `${svc.base}/history/device/${device}/history?${op}=150000&attr=a`, {
        token,
      });
      // Before: 500, RangeError (Maximum call stack size exceeded) in readClosed.
      expect(res.status, res.text.slice(0, 200)).toBe(200);
      expect(res.body).toHaveLength(150_000);
      expect([res.body[0]!.value, res.body[149_999]!.value]).toEqual(op === 'lastN' ? [149_999, 0] : [0, 149_999]);
    }
  }, 120_000);
});
