// GET /history/device/{id}/history with dateFrom / dateTo as epoch milliseconds (decisions.md
// "History", docs/messaging.md §6, docs/api.md "How requests are validated"): the same rows as
// the ISO forms, bounds inclusive and exact to the millisecond, one bound alone, with lastN /
// firstN and several attributes, digits past the microsecond, 0 and blanks around the digits.
// Rows are written directly with known times.
import { beforeAll, describe, expect, it } from 'vitest';
import type { HistoryByLabel, HistoryRecord } from '../helpers/api.js';
import { insertHistory } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';
import { getHistory, sensorWithTemperatures, ts, valuesOf } from './fixtures.js';

const svc = useService({ HISTORY_MAX_RESULTS: '50' });
let tenant: string;
let token: string;
let device: string;

const ms = (minute: number) => Date.parse(ts(minute));

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('hie'));
  const pool = svc.service.pool;
  const sensor = await sensorWithTemperatures(pool, tenant);
  device = sensor.device;

  const rows = sensor.rows;
  rows.push({ tenant, device, attr: 'mode', ts: ts(3), value: '"eco"' });
  rows.push({ tenant, device, attr: 'mode', ts: ts(7), value: '"boost"' });
  // Values one millisecond either side of minute 2 and minute 4: the bounds must be exact.
  rows.push({ tenant, device, attr: 'mode', ts: '2024-05-01T12:01:59.999000Z', value: '"before"' });
  rows.push({ tenant, device, attr: 'mode', ts: '2024-05-01T12:04:00.001000Z', value: '"after"' });
  await insertHistory(pool, rows);
});

/** The history of `id` (the device by default) as `as` sees it. */
const get = <T = HistoryRecord[]>(query: string, as = token, id = device) => getHistory<T>(svc.base, as, id, query);

describe('dateFrom / dateTo as epoch milliseconds', () => {
  it('select the same rows as the ISO forms, bounds inclusive', async () => {
    const iso = await get(`?attr=temperature&dateFrom=${ts(2)}&dateTo=${ts(4)}`);
    const epoch = await get(`?attr=temperature&dateFrom=${ms(2)}&dateTo=${ms(4)}`);
    expect(iso.status).toBe(200);
    expect(epoch.status).toBe(200);
    expect(valuesOf(epoch.body)).toEqual([24, 23, 22]);
    expect(epoch.body).toEqual(iso.body);
    // mixed forms
    expect((await get(`?attr=temperature&dateFrom=${ms(2)}&dateTo=${ts(4)}`)).body).toEqual(iso.body);
    expect((await get(`?attr=temperature&dateFrom=${ts(2)}&dateTo=${ms(4)}`)).body).toEqual(iso.body);
  });

  it('are exact to the millisecond: one ms inside a bound leaves that row out', async () => {
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(2) + 1}&dateTo=${ms(4)}`)).body)).toEqual([24, 23]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(2)}&dateTo=${ms(4) - 1}`)).body)).toEqual([23, 22]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(4)}&dateTo=${ms(4)}`)).body)).toEqual([24]);
    // rows 1 ms outside [minute 2, minute 4] are not selected; ones inside are
    expect(valuesOf((await get(`?attr=mode&dateFrom=${ms(2)}&dateTo=${ms(4)}`)).body)).toEqual(['eco']);
    expect(valuesOf((await get(`?attr=mode&dateFrom=${ms(2) - 1}&dateTo=${ms(4) + 1}`)).body)).toEqual(['after', 'eco', 'before']);
  });

  it('one bound alone, with lastN / firstN, and for several attributes (the object form)', async () => {
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(7)}`)).body)).toEqual([29, 28, 27]);
    expect(valuesOf((await get(`?attr=temperature&dateTo=${ms(1)}`)).body)).toEqual([21, 20]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(2)}&firstN=2`)).body)).toEqual([22, 23]);
    expect(valuesOf((await get(`?attr=temperature&dateTo=${ms(4)}&lastN=2`)).body)).toEqual([24, 23]);
    const iso = await get(`?attr=temperature,mode&dateFrom=${ts(3)}&dateTo=${ts(7)}`);
    const epoch = await get<HistoryByLabel>(`?attr=temperature,mode&dateFrom=${ms(3)}&dateTo=${ms(7)}`);
    expect(epoch.body).toEqual(iso.body);
    expect(valuesOf(epoch.body.temperature!)).toEqual([27, 26, 25, 24, 23]);
    expect(valuesOf(epoch.body.mode!)).toEqual(['boost', 'after', 'eco']);
    // no attr: every label of the device
    expect((await get(`?dateFrom=${ms(3)}&dateTo=${ms(7)}`)).body).toEqual(iso.body);
  });

  it('digits past the microsecond: cut off in dateTo, rounded up in dateFrom (found by an audit)', async () => {
    // Minute 2 is 12:02:00.000000; a bound 0.4 µs after it excludes it as a lower bound, and
    // includes it as an upper one; one 0.4 µs before it includes it as a lower bound.
    const after = '2024-05-01T12:02:00.0000004Z';
    const before = '2024-05-01T12:01:59.9999996Z';
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${after}&dateTo=${ms(4)}`)).body)).toEqual([24, 23]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${before}&dateTo=${ms(4)}`)).body)).toEqual([24, 23, 22]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(1)}&dateTo=${after}`)).body)).toEqual([22, 21]);
    // Any number of digits: ten or more were 400 "not an ISO 8601 date" (found by an audit).
    const afterLong = '2024-05-01T12:02:00.00000000000001Z';
    const beforeLong = '2024-05-01T12:01:59.99999999999999Z';
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${afterLong}&dateTo=${ms(4)}`)).body)).toEqual([24, 23]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${beforeLong}&dateTo=${ms(4)}`)).body)).toEqual([24, 23, 22]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(1)}&dateTo=${afterLong}`)).body)).toEqual([22, 21]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=${ms(1)}&dateTo=${beforeLong}`)).body)).toEqual([21]);
    // The same bound in an aggregate and in the export.
    const agg = await get(`?attr=temperature&interval=1h&agg=count&dateFrom=${after}&dateTo=${ms(4)}`);
    expect(agg.body).toEqual([{ ts: '2024-05-01T12:00:00.000000Z', count: 2 }]);
    const exported = await http('GET', `${svc.base}/history/export?devices=${device}&attr=temperature&dateFrom=${after}&dateTo=${ms(4)}`, {
      token,
    });
    expect(
      exported.text
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as HistoryRecord).value),
    ).toEqual([23, 24]);
  });

  it('0 is the epoch itself (everything here is after it); blanks around the digits are allowed', async () => {
    expect((await get('?attr=temperature&dateFrom=0')).body).toHaveLength(10);
    expect((await get('?attr=temperature&dateTo=0')).body).toEqual([]);
    expect(valuesOf((await get(`?attr=temperature&dateFrom=%20${ms(8)}%20`)).body)).toEqual([29, 28]);
  });
});
