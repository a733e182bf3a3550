// GET /history/device/{id}/history: every operator and response mode, errors, tenant isolation.
// Rows are written directly with known times, so every expectation is exact.
import { beforeAll, describe, expect, it } from 'vitest';
import { seriesKey } from '../../src/history/series.js';
import type { ErrorBody, HistoryByLabel, HistoryRecord } from '../helpers/api.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { getHistory, ts, valuesOf } from './fixtures.js';

const svc = useService({ HISTORY_MAX_RESULTS: '50' });
let tenant: string;
let token: string;
let otherTenant: string;
let otherToken: string;
let device: string;
let empty: string;
let bare: string;

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('his'));
  ({ tenant: otherTenant, token: otherToken } = await svc.freshTenant('oth'));
  const pool = svc.service.pool;
  const t = await createTemplate(pool, tenant, 'sensor', [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'mode', type: 'dynamic', value_type: 'string' },
    { label: 'flag', type: 'dynamic', value_type: 'bool' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: 'S' },
  ]);
  device = await createDevice(pool, tenant, [t]);
  empty = await createDevice(pool, tenant, [t]);
  bare = await createDevice(pool, tenant, []);
  // The same device id in another tenant, with its own data.
  const t2 = await createTemplate(pool, otherTenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  await createDevice(pool, otherTenant, [t2], { id: device });
  const rows = [];
  for (let m = 0; m < 10; m++) rows.push({ tenant, device, attr: 'temperature', ts: ts(m), value: String(20 + m) });
  rows.push({ tenant, device, attr: 'mode', ts: ts(3), value: '"eco"' });
  rows.push({ tenant, device, attr: 'mode', ts: ts(7), value: '"boost"' });
  rows.push({ tenant, device, attr: 'flag', ts: ts(5), value: 'true' });
  rows.push({ tenant: otherTenant, device, attr: 'temperature', ts: ts(1), value: '99' });
  // A value far in the past lands in its own partition; queries span partitions.
  rows.push({ tenant, device, attr: 'mode', ts: '2023-01-01T00:00:00.000000Z', value: '"old"' });
  await insertHistory(pool, rows);
});

/** The history of `id` (the device by default) as `as` sees it. */
const get = <T = HistoryRecord[]>(query: string, as = token, id = device) => getHistory<T>(svc.base, as, id, query);

describe('one attribute: an array of records', () => {
  it('lastN: newest first, records as in the contract', async () => {
    const res = await get('?lastN=3&attr=temperature');
    expect(res.status).toBe(200);
    expect(res.body).toEqual([
      { device_id: device, ts: ts(9), value: 29, attr: 'temperature' },
      { device_id: device, ts: ts(8), value: 28, attr: 'temperature' },
      { device_id: device, ts: ts(7), value: 27, attr: 'temperature' },
    ]);
  });

  it('firstN: oldest first, and it wins over lastN', async () => {
    expect(valuesOf((await get('?firstN=2&attr=temperature')).body)).toEqual([20, 21]);
    expect(valuesOf((await get('?firstN=2&lastN=5&attr=temperature')).body)).toEqual([20, 21]);
  });

  it('dateFrom and dateTo are inclusive and combine with lastN / firstN', async () => {
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ts(2)}&dateTo=${ts(4)}`)).body)).toEqual([24, 23, 22]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ts(2)}&firstN=2`)).body)).toEqual([22, 23]);
    expect(valuesOf((await get(`?attr=temperature&dateTo=${ts(4)}&lastN=2`)).body)).toEqual([24, 23]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=2024-05-01T14:00:00%2B02:00&dateTo=2024-05-01T12:01:00Z`)).body)).toEqual([
      21, 20,
    ]);
  });

  it('without lastN/firstN (or with 0): every value, newest first, up to HISTORY_MAX_RESULTS', async () => {
    expect(valuesOf((await get('?attr=temperature')).body)).toEqual([29, 28, 27, 26, 25, 24, 23, 22, 21, 20]);
    expect((await get('?attr=temperature&lastN=0')).body).toHaveLength(10);
  });

  it('firstN=0: every value too, but oldest first (firstN keeps its order, and still wins over lastN)', async () => {
    expect(valuesOf((await get('?attr=temperature&firstN=0')).body)).toEqual([20, 21, 22, 23, 24, 25, 26, 27, 28, 29]);
    expect(valuesOf((await get('?attr=temperature&firstN=0&lastN=2')).body)).toEqual([20, 21, 22, 23, 24, 25, 26, 27, 28, 29]);
  });

  it('values keep their JSON type', async () => {
    expect((await get('?attr=mode&lastN=1')).body[0]!.value).toBe('boost');
    expect((await get('?attr=flag')).body[0]!.value).toBe(true);
  });

  it('across partitions (an old value in its own partition)', async () => {
    expect((await get('?attr=mode&firstN=1')).body.map((r) => [r.value, r.ts])).toEqual([['old', '2023-01-01T00:00:00.000000Z']]);
  });

  it('an attribute without data, or a label the device does not have: []', async () => {
    expect((await get('?attr=serial')).body).toEqual([]);
    expect((await get('?attr=nosuch&lastN=3')).body).toEqual([]);
    expect((await get('?attr=temperature', token, empty)).body).toEqual([]);
  });
});

describe('values of a label the device no longer has', () => {
  it('are not answered: [] for one attr, [] under that label for several', async () => {
    // Rows left by an attribute since removed from the device's template (or a template the
    // device left): the label is no longer the device's.
    await insertHistory(svc.service.pool, [{ tenant, device, attr: 'retired', ts: ts(4), value: '1' }]);
    expect((await get('?attr=retired')).body).toEqual([]);
    expect((await get('?attr=retired&lastN=1&dateFrom=2024-01-01T00:00:00Z')).body).toEqual([]);
    const res = await get('?attr=retired,temperature&lastN=1');
    expect(res.body).toEqual({ retired: [], temperature: [{ device_id: device, ts: ts(9), value: 29, attr: 'temperature' }] });
  });
});

describe('several attributes, or none: an object by label', () => {
  it('comma-separated', async () => {
    const res = await get<HistoryByLabel>('?attr=temperature,mode&lastN=2');
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(['temperature', 'mode']);
    expect(valuesOf(res.body.temperature!)).toEqual([29, 28]);
    expect(valuesOf(res.body.mode!)).toEqual(['boost', 'eco']);
  });

  it('the same label written twice is "several": an object, the label once', async () => {
    const one = [{ device_id: device, ts: ts(9), value: 29, attr: 'temperature' }];
    expect((await get('?attr=temperature,temperature&lastN=1')).body).toEqual({ temperature: one });
    expect((await get('?attr=temperature&attr=temperature&lastN=1')).body).toEqual({ temperature: one });
    // a blank part is no label: one label written, an array
    expect((await get('?attr=temperature,&lastN=1')).body).toEqual(one);
  });

  it('repeated, including a label without data', async () => {
    const res = await get('?attr=flag&attr=nosuch&firstN=5');
    expect(res.body).toEqual({ flag: [{ device_id: device, ts: ts(5), value: true, attr: 'flag' }], nosuch: [] });
  });

  it('absent: every attribute label of the device, [] where there is no data', async () => {
    const res = await get('?lastN=1');
    expect(res.body).toEqual({
      temperature: [{ device_id: device, ts: ts(9), value: 29, attr: 'temperature' }],
      mode: [{ device_id: device, ts: ts(7), value: 'boost', attr: 'mode' }],
      flag: [{ device_id: device, ts: ts(5), value: true, attr: 'flag' }],
      serial: [],
    });
  });

  it('absent, for a device without attributes: {}', async () => {
    expect((await get('', token, bare)).body).toEqual({});
  });
});

describe('errors and isolation', () => {
  it('an unknown device: 404 No such device', async () => {
    const res = await get('?lastN=1&attr=temperature', token, 'ffffff');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'No such device: ffffff', status: 404 });
  });

  it('a NUL character in the device id or a label is no id or label (PostgreSQL text cannot hold it): 404 or [], never 500', async () => {
    const nul = await get('?attr=temperature', token, '%00');
    expect([nul.status, nul.body]).toEqual([404, { message: 'No such device: \0', status: 404 }]);
    expect((await get('?attr=tem%00perature&lastN=1')).body).toEqual([]);
    expect((await get('?attr=temperature,%00&lastN=1')).body).toEqual({
      temperature: [{ device_id: device, ts: ts(9), value: 29, attr: 'temperature' }],
      '\0': [],
    });
    expect((await get('?attr=%00&attr=a%00b')).body).toEqual({ '\0': [], 'a\0b': [] });
    expect((await get('?attr=%00', token, 'ffffff')).status).toBe(404);
  });

  it('a device of another tenant is not visible; the same id in another tenant has its own data', async () => {
    const mine = await get('?attr=temperature&firstN=1', token);
    const theirs = await get('?attr=temperature', otherToken);
    expect(valuesOf(mine.body)).toEqual([20]);
    expect(valuesOf(theirs.body)).toEqual([99]);
    const stranger = await tenantToken(svc.base, svc.token, `x${tenant}`);
    expect((await get('?attr=temperature', stranger)).status).toBe(404);
  });

  it.each([
    ['lastN=-1', /lastN must be a non-negative integer/],
    ['lastN=abc', /lastN must be a non-negative integer/],
    ['firstN=1.5', /firstN must be a non-negative integer/],
    ['lastN=51', /lastN must be at most 50/],
    ['dateFrom=yesterday', /dateFrom must be an ISO 8601 date/],
    ['dateTo=2024-13-01', /dateTo must be an ISO 8601 date/],
  ])('a bad operator (%s): 400 with a clear message', async (query, message) => {
    const res = await get<ErrorBody>(`?${query}&attr=temperature`);
    expect(res.status).toBe(400);
    expect(res.body.status).toBe(400);
    expect(res.body.message).toMatch(message);
  });

  it('bad operators are checked by the query schema: the exact body, the first bad operator, before the device', async () => {
    const dateMessage = 'dateFrom must be an ISO 8601 date and time (e.g. 2024-05-01T12:00:00Z), got "yesterday"';
    expect((await get('?attr=temperature&dateFrom=yesterday')).body).toEqual({ message: dateMessage, status: 400 });
    expect((await get('?dateTo=nope&dateFrom=yesterday&firstN=2')).body).toEqual({ message: dateMessage, status: 400 });
    for (const id of ['ffffff', bare]) {
      const res = await get('?lastN=abc', token, id);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ message: 'lastN must be a non-negative integer, got "abc"', status: 400 });
    }
  });

  it('blank dateFrom / dateTo: no bound', async () => {
    expect(valuesOf((await get('?attr=temperature&dateFrom=&dateTo=%20')).body)).toHaveLength(10);
  });

  it('a bound may be the last microsecond of year 9999 (an inclusive end of everything), not later', async () => {
    const end = await get('?attr=temperature&dateTo=9999-12-31T23:59:59.999999Z');
    expect(valuesOf(end.body)).toHaveLength(10);
    expect(valuesOf((await get('?attr=temperature&dateFrom=9999-12-31T23:59:59.999999Z')).body)).toEqual([]);
    const r = await get('?attr=temperature&dateTo=10000-01-01T00:00:00Z');
    expect(r.status).toBe(400);
  });

  it('a bound before 1970 is a date like any other (from year 1): the whole series, or nothing', async () => {
    for (const from of ['1969-12-31T23:59:59Z', '1900-01-01', '0001-01-01T00:00:00Z'])
      expect(valuesOf((await get(`?attr=temperature&dateFrom=${from}&lastN=3`)).body), from).toEqual([29, 28, 27]);
    expect(valuesOf((await get('?attr=temperature&dateFrom=1900-01-01&firstN=2')).body)).toEqual([20, 21]);
    expect((await get('?attr=temperature&dateFrom=1900-01-01&dateTo=1969-12-31T23:59:59.999999Z')).body).toEqual([]);
    expect((await get('?dateTo=1950-06-01T00:00:00%2B01:00')).body).toEqual({ temperature: [], mode: [], flag: [], serial: [] });
    // Aggregates over such a range: the bucket limit says it is too wide.
    for (const q of [
      'interval=1d&agg=avg&dateFrom=1900-01-01',
      'interval=1M&agg=count&dateFrom=0001-01-01',
      'interval=1w&tz=Europe/Berlin&agg=max&dateFrom=1900-01-01',
    ]) {
      const wide = await get<ErrorBody>(`?attr=temperature&${q}&dateTo=2024-05-02`);
      expect(wide.status, q).toBe(400);
      expect(wide.body.message).toMatch(/at most 1000 \(HISTORY_MAX_BUCKETS\)/);
    }
    const years = await get('?attr=temperature&interval=1M&agg=count&dateFrom=1960-01-01&dateTo=2024-05-02');
    expect(years.body).toEqual([{ ts: '2024-05-01T00:00:00.000000Z', count: 10 }]);
    // Year 0 and before is no date of ours.
    expect((await get('?attr=temperature&dateFrom=0000-12-31T00:00:00Z')).status).toBe(400);
  });

  it('needs a token like every route', async () => {
    const res = await http('GET', `${svc.base}/history/device/${device}/history?lastN=1`);
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ message: 'No authorization token has been supplied', status: 401 });
  });
});

describe('the series key', () => {
  it('the service computes the same key as history_series() in SQL, for any text', async () => {
    const triples = [
      ['acme', '4b220f', 'temperature'],
      ['t', 'd', 'a'],
      ['tenant-ü', 'dévice', 'température ☃'],
      ['a\tb', 'c\\d', 'e\nf'],
      ['x'.repeat(300), 'y', 'z'],
    ];
    const { rows } = await svc.service.pool.query<{ key: string }>(
      'SELECT history_series(t, d, a)::text AS key FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(t, d, a, o) ORDER BY o',
      [triples.map((t) => t[0]), triples.map((t) => t[1]), triples.map((t) => t[2])],
    );
    expect(rows.map((r) => r.key)).toEqual(triples.map(([t, d, a]) => seriesKey(t!, d!, a!)));
  });

  it('a row of another series under the same key (a collision) is never returned', async () => {
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'collide', [
      { label: 'a', type: 'dynamic', value_type: 'float' },
      { label: 'b', type: 'dynamic', value_type: 'float' },
    ]);
    const id = await createDevice(pool, tenant, [t]);
    await insertHistory(pool, [{ tenant, device: id, attr: 'a', ts: ts(1), value: '1' }]);
    // Attribute b stored under a's key, as if the two keys collided.
    await pool.query('INSERT INTO history (tenant, device_id, attr, series, ts, value) VALUES ($1, $2, $3, $4, $5, $6)', [
      tenant,
      id,
      'b',
      seriesKey(tenant, id, 'a'),
      ts(2),
      '2',
    ]);
    const a = [{ device_id: id, ts: ts(1), value: 1, attr: 'a' }];
    expect((await get('?lastN=5&attr=a', token, id)).body).toEqual(a);
    expect((await get('?firstN=5&attr=a&dateFrom=2024-01-01T00:00:00Z', token, id)).body).toEqual(a);
    expect((await get('?lastN=5&attr=a&attr=b', token, id)).body).toEqual({ a, b: [] });
    expect((await get('?lastN=5', token, id)).body).toEqual({ a, b: [] });
  });
});
