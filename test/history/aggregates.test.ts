// GET /history/device/{id}/history with `interval` and `agg` (docs/api.md "History aggregates"):
// exact buckets for crafted rows, calendar days across both 2024 DST changes of Europe/Berlin
// (23 h and 25 h days), months and weeks, fill=null, HISTORY_MAX_BUCKETS, and every refusal.
// The same file runs on whichever layout the test database has (TimescaleDB with
// TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5433/postgres): the answers must not differ.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ErrorBody } from '../helpers/api.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { freshDatabase, login, startTestService, useService, type TestService } from '../helpers/service.js';
import { getHistory } from './fixtures.js';

const svc = useService({ HISTORY_MAX_BUCKETS: '100' });
let tenant: string;
let token: string;
let otherTenant: string;
let otherToken: string;
let device: string;
let dst: string;
let havana: string;

type Bucket = { ts: string } & Record<string, unknown>;

const get = <T = Bucket[]>(query: string, id = device, as = token) => getHistory<T>(svc.base, as, id, query);
const at = (iso: string) => iso.replace('Z', '.000000Z').replace(/\.(\d{3})\.000000Z$/, '.$1000Z');

/**
 * A fresh device of template `label` (one float attribute `temperature`) holding `values` (ts,
 * value): the buckets `query` reads must be `expected`, from the rows and again from the rollups.
 */
async function sameFromRowsAndRollups(label: string, values: Array<[string, string]>, query: string, expected: Bucket[]) {
  const pool = svc.service.pool;
  const t = await createTemplate(pool, tenant, label, [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  const id = await createDevice(pool, tenant, [t]);
  await insertHistory(
    pool,
    values.map(([ts, value]) => ({ tenant, device: id, attr: 'temperature', ts, value })),
  );
  const rows = await get(query, id);
  expect(rows.status).toBe(200);
  expect(rows.body).toEqual(expected);
  await svc.service.historyMaintenance.rollUp();
  expect((await get(query, id)).body).toEqual(expected);
}
const hours = (fromIso: string, count: number) => Array.from({ length: count }, (_, i) => new Date(Date.parse(fromIso) + i * 3_600_000));

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('agg'));
  ({ tenant: otherTenant, token: otherToken } = await svc.freshTenant('ago'));
  const pool = svc.service.pool;
  const t = await createTemplate(pool, tenant, 'sensor', [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'mode', type: 'dynamic', value_type: 'string' },
    { label: 'pulses', type: 'dynamic', value_type: 'integer' },
  ]);
  device = await createDevice(pool, tenant, [t]);
  dst = await createDevice(pool, tenant, [t]);
  havana = await createDevice(pool, tenant, [t]);
  const rows: Array<{ tenant: string; device: string; attr: string; ts: string; value: string }> = [];
  const put = (id: string, attr: string, ts: string, value: string) => rows.push({ tenant, device: id, attr, ts, value });
  put(device, 'temperature', '2024-05-01T10:00:00Z', '1');
  put(device, 'temperature', '2024-05-01T10:20:00Z', '2');
  put(device, 'temperature', '2024-05-01T10:40:00Z', '6');
  put(device, 'temperature', '2024-05-01T11:10:00Z', '10');
  // 0.1 + 0.2: 0.3 exactly (sums are decimal), not 0.30000000000000004
  put(device, 'temperature', '2024-05-01T13:30:00Z', '0.1');
  put(device, 'temperature', '2024-05-01T13:45:00Z', '0.2');
  put(device, 'mode', '2024-05-01T10:05:00Z', '"eco"');
  put(device, 'mode', '2024-05-01T10:50:00Z', '"boost"');
  put(device, 'mode', '2024-05-01T13:00:00Z', '"off"');
  // Months: 2024-03-31T21:30Z is 23:30 in Berlin (March), 22:30Z is 00:30 on 1 April.
  put(device, 'pulses', '2024-01-15T12:00:00Z', '1');
  put(device, 'pulses', '2024-02-29T23:30:00Z', '2'); // Berlin: 1 March 00:30
  put(device, 'pulses', '2024-03-31T21:30:00Z', '4');
  put(device, 'pulses', '2024-03-31T22:30:00Z', '8');
  // DST: one value (1) every hour, from Berlin's local midnight of 30 March to 23:00 on 1 April,
  // and from local midnight of 26 October to 23:00 on 28 October.
  for (const d of hours('2024-03-29T23:00:00Z', 24 + 23 + 24)) put(dst, 'pulses', d.toISOString(), '1');
  for (const d of hours('2024-10-25T22:00:00Z', 24 + 25 + 24)) put(dst, 'pulses', d.toISOString(), '1');
  // America/Havana goes back from 01:00 CDT to 00:00 CST on 3 November 2024: local midnight
  // happens twice (04:00 and 05:00 UTC). One value every hour from local midnight of 2 November
  // (04:00 UTC) to 23:00 on 4 November; 7 at the first midnight of the 3rd, 1 elsewhere.
  for (const d of hours('2024-11-02T04:00:00Z', 24 + 25 + 24))
    put(havana, 'pulses', d.toISOString(), d.toISOString() === '2024-11-03T04:00:00.000Z' ? '7' : '1');
  await insertHistory(pool, rows);
});

describe('fixed-length buckets', () => {
  it('hourly avg, min, max, sum, count, first, last: exact values, buckets in time order, empty ones left out', async () => {
    const r = await get(
      '?attr=temperature&interval=1h&agg=avg,min,max,sum,count,first,last&dateFrom=2024-05-01T10:00:00Z&dateTo=2024-05-01T13:59:59Z',
    );
    expect(r.status).toBe(200);
    expect(r.body).toEqual([
      { ts: at('2024-05-01T10:00:00Z'), avg: 3, min: 1, max: 6, sum: 9, count: 3, first: 1, last: 6 },
      { ts: at('2024-05-01T11:00:00Z'), avg: 10, min: 10, max: 10, sum: 10, count: 1, first: 10, last: 10 },
      { ts: at('2024-05-01T13:00:00Z'), avg: 0.15, min: 0.1, max: 0.2, sum: 0.3, count: 2, first: 0.1, last: 0.2 },
    ]);
    // Only the aggregates asked, in the documented order whatever order they were written in
    const two = await get('?attr=temperature&interval=1h&agg=count&agg=avg&dateFrom=2024-05-01T10:00:00Z&dateTo=2024-05-01T11:59:59Z');
    expect(two.body).toEqual([
      { ts: at('2024-05-01T10:00:00Z'), avg: 3, count: 3 },
      { ts: at('2024-05-01T11:00:00Z'), avg: 10, count: 1 },
    ]);
  });

  it('a sum beyond the range of a double is null, from the rows and from the rollups alike', async () => {
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'huge', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
    const huge = await createDevice(pool, tenant, [t]);
    await insertHistory(pool, [
      { tenant, device: huge, attr: 'temperature', ts: '2024-05-02T10:00:00Z', value: '1.7e308' },
      { tenant, device: huge, attr: 'temperature', ts: '2024-05-02T10:00:01Z', value: '1.7e308' },
      { tenant, device: huge, attr: 'temperature', ts: '2024-05-02T11:00:00Z', value: '-1' },
    ]);
    const q = '?attr=temperature&interval=1h&agg=avg,max,sum,count&dateFrom=2024-05-02T10:00:00Z&dateTo=2024-05-02T11:59:59Z';
    const expected = [
      { ts: at('2024-05-02T10:00:00Z'), avg: 1.7e308, max: 1.7e308, sum: null, count: 2 },
      { ts: at('2024-05-02T11:00:00Z'), avg: -1, max: -1, sum: -1, count: 1 },
    ];
    const rows = await get(q, huge);
    expect(rows.status).toBe(200);
    expect(rows.body).toEqual(expected);
    await svc.service.historyMaintenance.rollUp();
    expect((await get(q, huge)).body).toEqual(expected);
    const day = (await get(q.replace('interval=1h', 'interval=1d'), huge)).body;
    expect(day).toMatchObject([{ ts: at('2024-05-02T00:00:00Z'), max: 1.7e308, sum: null, count: 3 }]);
    expect((day[0]!.avg as number) / 1e308).toBeCloseTo((1.7 * 2) / 3, 12);
  });

  it('an average or sum nearer zero than the smallest double is 0, from the rows and from the rollups alike (was 500)', async () => {
    // 5e-324 is the smallest double: the average of it and two zeros (1.7e-324) and the sum
    // 1.04e-322 - 1e-322 - 5e-324 (-1e-324) round to 0, which PostgreSQL refuses to cast to float8.
    await sameFromRowsAndRollups(
      'tiny',
      [
        ['2024-05-02T10:00:00Z', '5e-324'],
        ['2024-05-02T10:00:01Z', '0'],
        ['2024-05-02T10:00:02Z', '0'],
        ['2024-05-02T11:00:00Z', '1.04e-322'],
        ['2024-05-02T11:00:01Z', '-1e-322'],
        ['2024-05-02T11:00:02Z', '-5e-324'],
      ],
      '?attr=temperature&interval=1h&agg=avg,min,max,sum,count&dateFrom=2024-05-02T10:00:00Z&dateTo=2024-05-02T11:59:59Z',
      [
        { ts: at('2024-05-02T10:00:00Z'), avg: 0, min: 0, max: 5e-324, sum: 5e-324, count: 3 },
        { ts: at('2024-05-02T11:00:00Z'), avg: 0, min: -1e-322, max: 1.04e-322, sum: 0, count: 3 },
      ],
    );
  });

  it('an average is the double nearest the exact average, from the rows and from the rollups alike (was one unit off)', async () => {
    // (0.01 + 0 + 0) / 3 = 1/300, whose nearest double is 0.0033333333333333335 (as 0.01 / 3 in
    // doubles); numeric's avg kept 16 digits, 0.0033333333333333333, rounded to the double below.
    // 4.001 / 3 likewise: 1.3336666666666666 (doubles say ...668, 4.001 being stored a little above).
    await sameFromRowsAndRollups(
      'mean',
      [
        ['2024-05-02T10:00:00Z', '0.01'],
        ['2024-05-02T10:00:01Z', '0'],
        ['2024-05-02T10:00:02Z', '0'],
        ['2024-05-02T11:00:00Z', '4.001'],
        ['2024-05-02T11:00:01Z', '0'],
        ['2024-05-02T11:00:02Z', '0'],
      ],
      '?attr=temperature&interval=1h&agg=avg,sum,count&dateFrom=2024-05-02T10:00:00Z&dateTo=2024-05-02T11:59:59.999999Z',
      [
        { ts: at('2024-05-02T10:00:00Z'), avg: 0.0033333333333333335, sum: 0.01, count: 3 },
        { ts: at('2024-05-02T11:00:00Z'), avg: 1.3336666666666666, sum: 4.001, count: 3 },
      ],
    );
  });

  it('bounds are inclusive and cut buckets: a partial bucket aggregates only the rows inside', async () => {
    const r = await get('?attr=temperature&interval=1h&agg=sum,count&dateFrom=2024-05-01T10:10:00Z&dateTo=2024-05-01T11:10:00Z');
    expect(r.body).toEqual([
      { ts: at('2024-05-01T10:00:00Z'), sum: 8, count: 2 },
      { ts: at('2024-05-01T11:00:00Z'), sum: 10, count: 1 },
    ]);
  });

  it('15m and 30s buckets are counted from the epoch; fill=null adds the empty ones (count 0, others null)', async () => {
    const r = await get('?attr=temperature&interval=15m&agg=count,max&fill=null&dateFrom=2024-05-01T10:00:00Z&dateTo=2024-05-01T11:14:59Z');
    expect(r.body).toEqual([
      { ts: at('2024-05-01T10:00:00Z'), count: 1, max: 1 },
      { ts: at('2024-05-01T10:15:00Z'), count: 1, max: 2 },
      { ts: at('2024-05-01T10:30:00Z'), count: 1, max: 6 },
      { ts: at('2024-05-01T10:45:00Z'), count: 0, max: null },
      { ts: at('2024-05-01T11:00:00Z'), count: 1, max: 10 },
    ]);
    const s = await get('?attr=temperature&interval=30s&agg=last&dateFrom=2024-05-01T10:19:45Z&dateTo=2024-05-01T10:20:45Z');
    expect(s.body).toEqual([{ ts: at('2024-05-01T10:20:00Z'), last: 2 }]);
  });

  it('a dateFrom after dateTo is an empty range: no bucket, with fill=null too, whether or not both fall in one bucket (was one empty bucket)', async () => {
    for (const q of [
      '?attr=temperature&interval=1h&agg=count&fill=null&dateFrom=2024-05-01T10:50:00Z&dateTo=2024-05-01T10:10:00Z',
      '?attr=temperature&interval=1h&agg=count&fill=null&dateFrom=2024-05-01T11:10:00Z&dateTo=2024-05-01T10:50:00Z',
      '?attr=temperature&interval=1d&agg=count&fill=null&tz=Europe/Berlin&dateFrom=2024-05-01T12:00:00Z&dateTo=2024-05-01T10:00:00Z',
      '?attr=temperature&interval=1h&agg=count&dateFrom=2024-05-01T10:50:00Z&dateTo=2024-05-01T10:10:00Z',
    ]) {
      const r = await get(q);
      expect(r.status).toBe(200);
      expect(r.body, q).toEqual([]);
    }
  });

  it('count, first and last apply to any attribute; first/last keep the stored JSON type', async () => {
    const r = await get('?attr=mode&interval=1h&agg=count,first,last&dateFrom=2024-05-01T00:00:00Z&dateTo=2024-05-01T23:59:59Z');
    expect(r.body).toEqual([
      { ts: at('2024-05-01T10:00:00Z'), count: 2, first: 'eco', last: 'boost' },
      { ts: at('2024-05-01T13:00:00Z'), count: 1, first: 'off', last: 'off' },
    ]);
  });

  it('several attributes (or none): an object by label, like the raw answer', async () => {
    const q = '&interval=1d&agg=count&dateFrom=2024-05-01T00:00:00Z&dateTo=2024-05-01T23:59:59Z';
    const r = await get<Record<string, Bucket[]>>(`?attr=temperature,mode${q}`);
    expect(r.body).toEqual({
      temperature: [{ ts: at('2024-05-01T00:00:00Z'), count: 6 }],
      mode: [{ ts: at('2024-05-01T00:00:00Z'), count: 3 }],
    });
    const all = await get<Record<string, Bucket[]>>(`?${q.slice(1)}`);
    expect(all.body).toEqual({ ...r.body, pulses: [] });
    // a label the device does not have: [] (as for raw values)
    expect((await get<Record<string, Bucket[]>>(`?attr=temperature&attr=nope${q}`)).body).toEqual({
      temperature: r.body.temperature,
      nope: [],
    });
  });

  it('without dateFrom / dateTo the range is the first to the last value', async () => {
    const r = await get('?attr=mode&interval=1h&agg=count&fill=null');
    expect(r.body.map((b) => [b.ts, b.count])).toEqual([
      [at('2024-05-01T10:00:00Z'), 2],
      [at('2024-05-01T11:00:00Z'), 0],
      [at('2024-05-01T12:00:00Z'), 0],
      [at('2024-05-01T13:00:00Z'), 1],
    ]);
  });
});

describe('calendar buckets and tz', () => {
  it('1d in Europe/Berlin: local days, 23 h on 2024-03-31 and 25 h on 2024-10-27', async () => {
    const spring = await get(
      `?attr=pulses&interval=1d&tz=Europe/Berlin&agg=count,sum&dateFrom=2024-03-29T00:00:00Z&dateTo=2024-04-02T00:00:00Z`,
      dst,
    );
    expect(spring.status).toBe(200);
    expect(spring.body).toEqual([
      { ts: at('2024-03-29T23:00:00Z'), count: 24, sum: 24 },
      { ts: at('2024-03-30T23:00:00Z'), count: 23, sum: 23 },
      { ts: at('2024-03-31T22:00:00Z'), count: 24, sum: 24 },
    ]);
    const autumn = await get(
      `?attr=pulses&interval=1d&tz=Europe/Berlin&agg=count&dateFrom=2024-10-25T00:00:00Z&dateTo=2024-10-29T00:00:00Z`,
      dst,
    );
    expect(autumn.body).toEqual([
      { ts: at('2024-10-25T22:00:00Z'), count: 24 },
      { ts: at('2024-10-26T22:00:00Z'), count: 25 },
      { ts: at('2024-10-27T23:00:00Z'), count: 24 },
    ]);
    // fill=null over the same range: the local days before and after too, with their own starts
    const filled = await get(
      `?attr=pulses&interval=1d&tz=Europe/Berlin&agg=count&fill=null&dateFrom=2024-03-29T00:00:00Z&dateTo=2024-04-02T00:00:00Z`,
      dst,
    );
    expect(filled.body.map((b) => [b.ts, b.count])).toEqual([
      [at('2024-03-28T23:00:00Z'), 0],
      [at('2024-03-29T23:00:00Z'), 24],
      [at('2024-03-30T23:00:00Z'), 23],
      [at('2024-03-31T22:00:00Z'), 24],
      [at('2024-04-01T22:00:00Z'), 0],
    ]);
  });

  it('a local midnight that happens twice (America/Havana): the day starts at the first one, 25 h long', async () => {
    const r = await get(
      '?attr=pulses&interval=1d&tz=America/Havana&agg=count,first&dateFrom=2024-11-02T00:00:00Z&dateTo=2024-11-05T12:00:00Z',
      havana,
    );
    expect(r.body).toEqual([
      { ts: at('2024-11-02T04:00:00Z'), count: 24, first: 1 },
      { ts: at('2024-11-03T04:00:00Z'), count: 25, first: 7 },
      { ts: at('2024-11-04T05:00:00Z'), count: 24, first: 1 },
    ]);
    // 1 November 2026 is such a day and the first of a month: the month starts at 04:00 UTC
    const month = await get(
      '?attr=pulses&interval=1M&tz=America/Havana&agg=count&fill=null&dateFrom=2026-11-01T04:30:00Z&dateTo=2026-11-20T00:00:00Z',
      havana,
    );
    expect(month.body).toEqual([{ ts: at('2026-11-01T04:00:00Z'), count: 0 }]);
  });

  it('a local day that never happened (Pacific/Apia skipped 30 December 2011) is no bucket, with fill=null too (was a second bucket at the next day’s start)', async () => {
    // Apia went from 23:59:59 on 29 December (-10) to 00:00 on 31 December (+14), at 10:00 UTC.
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'apia', [{ label: 'pulses', type: 'dynamic', value_type: 'integer' }]);
    const apia = await createDevice(pool, tenant, [t]);
    await insertHistory(pool, [
      { tenant, device: apia, attr: 'pulses', ts: '2011-12-29T12:00:00Z', value: '1' },
      { tenant, device: apia, attr: 'pulses', ts: '2011-12-30T12:00:00Z', value: '2' },
    ]);
    const q = '?attr=pulses&interval=1d&tz=Pacific/Apia&agg=count,sum&dateFrom=2011-12-29T12:00:00Z&dateTo=2011-12-31T12:00:00Z';
    const expected = [
      { ts: at('2011-12-29T10:00:00Z'), sum: 1, count: 1 },
      { ts: at('2011-12-30T10:00:00Z'), sum: 2, count: 1 },
      { ts: at('2011-12-31T10:00:00Z'), sum: null, count: 0 },
    ];
    expect((await get(`${q}&fill=null`, apia)).body).toEqual(expected);
    expect((await get(q, apia)).body).toEqual(expected.slice(0, 2));
  });

  it('a zone whose name is also an abbreviation (CET) follows its DST rules, not the abbreviation’s fixed offset', async () => {
    const q = '?attr=pulses&interval=1d&agg=count&dateFrom=2024-10-25T00:00:00Z&dateTo=2024-10-29T00:00:00Z';
    const cet = await get(`${q}&tz=CET`, dst);
    expect(cet.status).toBe(200);
    expect(cet.body).toEqual((await get(`${q}&tz=Europe/Berlin`, dst)).body);
    expect(cet.body[0]!.ts).toBe(at('2024-10-25T22:00:00Z'));
    // Zone names in any case, as Node and PostgreSQL take them.
    expect((await get(`${q}&tz=europe/berlin`, dst)).body).toEqual(cet.body);
    expect((await get(`${q}&tz=cet`, dst)).body).toEqual(cet.body);
    expect((await get(`${q}&tz=utc`, dst)).status).toBe(200);
  });

  it('1d without tz: UTC days', async () => {
    const r = await get(`?attr=pulses&interval=1d&agg=count&dateFrom=2024-03-29T00:00:00Z&dateTo=2024-04-02T00:00:00Z`, dst);
    expect(r.body).toEqual([
      { ts: at('2024-03-29T00:00:00Z'), count: 1 },
      { ts: at('2024-03-30T00:00:00Z'), count: 24 },
      { ts: at('2024-03-31T00:00:00Z'), count: 24 },
      { ts: at('2024-04-01T00:00:00Z'), count: 22 },
    ]);
  });

  it('1M: calendar months from local midnight of the first (Berlin: 23:00 or 22:00 UTC), or UTC', async () => {
    const q = '?attr=pulses&interval=1M&agg=sum,count,first&dateFrom=2024-01-01T00:00:00Z&dateTo=2024-12-31T00:00:00Z';
    const berlin = await get(`${q}&tz=Europe/Berlin`);
    expect(berlin.body).toEqual([
      { ts: at('2023-12-31T23:00:00Z'), sum: 1, count: 1, first: 1 },
      { ts: at('2024-02-29T23:00:00Z'), sum: 6, count: 2, first: 2 },
      { ts: at('2024-03-31T22:00:00Z'), sum: 8, count: 1, first: 8 },
    ]);
    const utc = await get(q);
    expect(utc.body).toEqual([
      { ts: at('2024-01-01T00:00:00Z'), sum: 1, count: 1, first: 1 },
      { ts: at('2024-02-01T00:00:00Z'), sum: 2, count: 1, first: 2 },
      { ts: at('2024-03-01T00:00:00Z'), sum: 12, count: 2, first: 4 },
    ]);
  });

  it('1w: ISO weeks from Monday, local midnight', async () => {
    const r = await get(
      '?attr=temperature&interval=1w&tz=Europe/Berlin&agg=count&dateFrom=2024-04-20T00:00:00Z&dateTo=2024-05-10T00:00:00Z',
    );
    // 2024-05-01 is a Wednesday: its week starts Monday 29 April, 00:00 in Berlin (22:00 UTC the day before)
    expect(r.body).toEqual([{ ts: at('2024-04-28T22:00:00Z'), count: 6 }]);
  });

  it('a bucket that starts before year 1 (1 BC) is written as year 0000, in time order', async () => {
    // Berlin's local mean time was +0:53:28: local midnight of 0001-01-01 is 23:06:32 UTC the day before.
    const day = await get('?attr=temperature&interval=1d&tz=Europe/Berlin&agg=count&fill=null&dateFrom=0001-01-01&dateTo=0001-01-02');
    expect(day.body).toEqual([
      { ts: '0000-12-31T23:06:32.000000Z', count: 0 },
      { ts: '0001-01-01T23:06:32.000000Z', count: 0 },
    ]);
    // 7-minute buckets counted from the epoch: the first one starts 6 minutes before year 1.
    const fixed = await get('?attr=temperature&interval=7m&agg=count&fill=null&dateFrom=0001-01-01&dateTo=0001-01-01T00:02:00Z');
    expect(fixed.body).toEqual([
      { ts: '0000-12-31T23:54:00.000000Z', count: 0 },
      { ts: '0001-01-01T00:01:00.000000Z', count: 0 },
    ]);
  });
});

describe('HISTORY_MAX_BUCKETS (100 here)', () => {
  it('100 buckets of the range answer; 101 answer 400 naming the limit, before any row is read', async () => {
    const ok = await get('?attr=temperature&interval=1m&agg=count&fill=null&dateFrom=2024-05-01T10:00:00Z&dateTo=2024-05-01T11:39:59Z');
    expect(ok.status).toBe(200);
    expect(ok.body).toHaveLength(100);
    const over = await get<ErrorBody>('?attr=temperature&interval=1m&agg=count&dateFrom=2024-05-01T10:00:00Z&dateTo=2024-05-01T11:40:00Z');
    expect(over.status).toBe(400);
    expect(over.body).toEqual({
      message:
        'interval 1m gives 101 buckets for "temperature"; at most 100 (HISTORY_MAX_BUCKETS): use a longer interval or a shorter dateFrom..dateTo',
      status: 400,
    });
  });

  it('months counted across 1 BC and AD 1 (no year 0 between them): 98 months answer 98 buckets (were counted 110 and refused)', async () => {
    // Pacific/Kiritimati kept its local mean time (-10:29:20) then: AD 1 starts in December 1 BC there.
    const q =
      '?attr=temperature&interval=1M&tz=Pacific/Kiritimati&agg=count&fill=null&dateFrom=0001-01-01T00:00:00Z&dateTo=0009-02-01T00:00:00Z';
    const r = await get(q);
    expect(r.status).toBe(200);
    expect(r.body).toHaveLength(98);
    expect(r.body[0]!.ts).toBe('0000-12-01T10:29:20.000000Z');
    expect(r.body[97]!.ts).toBe('0009-01-01T10:29:20.000000Z');
  });

  it('without bounds the data span counts: 10:00 to 13:45 is 226 one-minute buckets', async () => {
    const over = await get<ErrorBody>('?attr=temperature&interval=1m&agg=count');
    expect(over.status).toBe(400);
    expect(over.body.message).toContain('gives 226 buckets for "temperature"; at most 100 (HISTORY_MAX_BUCKETS)');
  });
});

describe('refusals (400) and the device (404)', () => {
  const q = '&dateFrom=2024-05-01T00:00:00Z&dateTo=2024-05-01T23:59:59Z';
  it.each([
    ['?attr=mode&interval=1h&agg=avg', 'avg needs a numeric attribute (float or integer); "mode" is string: use count, first or last'],
    [
      '?attr=mode&interval=1h&agg=count,min,sum',
      'min, sum need a numeric attribute (float or integer); "mode" is string: use count, first or last',
    ],
    ['?interval=1h&agg=max', 'max needs a numeric attribute (float or integer); "mode" is string: use count, first or last'],
    ['?attr=temperature&interval=1x&agg=avg', 'interval must be a count and a unit (s, m, h; e.g. 30s, 15m, 1h) or 1d, 1w, 1M, got "1x"'],
    ['?attr=temperature&interval=2d&agg=avg', 'interval must be a count and a unit (s, m, h; e.g. 30s, 15m, 1h) or 1d, 1w, 1M, got "2d"'],
    ['?attr=temperature&interval=0s&agg=avg', 'interval must be a count and a unit (s, m, h; e.g. 30s, 15m, 1h) or 1d, 1w, 1M, got "0s"'],
    ['?attr=temperature&interval=169h&agg=avg', 'interval must be at most one week (168h), got "169h"'],
    ['?attr=temperature&interval=1h&agg=median', 'agg must be any of avg, min, max, sum, count, first, last, got "median"'],
    ['?attr=temperature&interval=1h&agg=avg,mean', 'agg must be any of avg, min, max, sum, count, first, last, got "avg,mean"'],
    ['?attr=temperature&interval=1h', 'interval needs agg: any of avg, min, max, sum, count, first, last'],
    ['?attr=temperature&agg=avg', 'agg, tz and fill need interval (e.g. interval=1h&agg=avg)'],
    [
      '?attr=temperature&interval=1h&agg=avg&lastN=5',
      'lastN and firstN cannot be used with interval: choose the buckets with dateFrom and dateTo',
    ],
    ['?attr=temperature&interval=1d&agg=avg&tz=Mars/Olympus', 'tz must be an IANA time zone name (e.g. Europe/Berlin), got "Mars/Olympus"'],
    ['?attr=temperature&interval=1d&agg=avg&tz=UTC%2B3', 'tz must be an IANA time zone name (e.g. Europe/Berlin), got "UTC+3"'],
    // Java's legacy ids, which Node's ICU takes and PostgreSQL would read as fixed-offset abbreviations
    ['?attr=temperature&interval=1d&agg=avg&tz=IST', 'tz must be an IANA time zone name (e.g. Europe/Berlin), got "IST"'],
    ['?attr=temperature&interval=1h&agg=avg&tz=PST', 'tz must be an IANA time zone name (e.g. Europe/Berlin), got "PST"'],
    ['?attr=temperature&interval=1h&agg=avg&fill=zero', 'fill must be null, got "zero"'],
  ])('%s: 400', async (query, message) => {
    const r = await get<ErrorBody>(query + q);
    expect(r.body).toEqual({ message, status: 400 });
    expect(r.status).toBe(400);
  });

  it('an unknown device, or another tenant’s, is 404; a bad parameter is 400 first', async () => {
    expect((await get<ErrorBody>(`?interval=1h&agg=count${q}`, 'ffffff')).body).toEqual({ message: 'No such device: ffffff', status: 404 });
    const foreign = await get<ErrorBody>(`?interval=1h&agg=count${q}`, dst, otherToken);
    expect(foreign.body).toEqual({ message: `No such device: ${dst}`, status: 404 });
    expect((await get<ErrorBody>(`?interval=1h${q}`, 'ffffff')).status).toBe(400);
  });
});

it('the tenant is the token’s: the same device id in another tenant answers that tenant’s rows only', async () => {
  const pool = svc.service.pool;
  const t2 = await createTemplate(pool, otherTenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  await createDevice(pool, otherTenant, [t2], { id: device });
  await insertHistory(pool, [{ tenant: otherTenant, device, attr: 'temperature', ts: '2024-05-01T10:30:00Z', value: '100' }]);
  const q = '?attr=temperature&interval=1h&agg=count,max&dateFrom=2024-05-01T10:00:00Z&dateTo=2024-05-01T10:59:59Z';
  expect((await get(q)).body).toEqual([{ ts: at('2024-05-01T10:00:00Z'), count: 3, max: 6 }]);
  expect((await get(q, device, otherToken)).body).toEqual([{ ts: at('2024-05-01T10:00:00Z'), count: 1, max: 100 }]);
});

describe('a database whose extra_float_digits is 0 (set by ALTER DATABASE or ALTER ROLE)', () => {
  let other: TestService | undefined;
  afterAll(() => other?.stop());

  it('answers the same digits: averages and sums keep the double nearest the exact value (were cut to 15 digits)', async () => {
    const url = await freshDatabase();
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET extra_float_digits = 0`);
    await admin.end();
    other = await startTestService({ DATABASE_URL: url });
    const pool = other.service.pool;
    const t = await createTemplate(pool, 'admin', 'digits', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
    const id = await createDevice(pool, 'admin', [t]);
    await insertHistory(
      pool,
      [
        ['2024-05-02T10:00:00Z', '0.01'],
        ['2024-05-02T10:00:01Z', '0'],
        ['2024-05-02T10:00:02Z', '0'],
        ['2024-05-02T10:00:03Z', '0.1234567890123456'],
      ].map(([ts, value]) => ({ tenant: 'admin', device: id, attr: 'temperature', ts: ts!, value: value! })),
    );
    const r = await getHistory<Bucket[]>(
      other.base,
      await login(other.base),
      id,
      '?attr=temperature&interval=1h&agg=avg,min,max,sum&dateFrom=2024-05-02T10:00:00Z&dateTo=2024-05-02T10:59:59Z',
    );
    expect(r.body).toEqual([
      { ts: at('2024-05-02T10:00:00Z'), avg: 0.0333641972530864, min: 0, max: 0.1234567890123456, sum: 0.1334567890123456 },
    ]);
  });
});
