// GET /history/device/{id}/history at its edges (decisions.md "History", docs/messaging.md §6,
// docs/api.md "How requests are validated"): bounds as epoch milliseconds, a repeated lastN,
// lastN beyond 2^53, labels that are names of Object.prototype members, and another tenant's
// device on every response path. Rows are written directly with known times.
import { beforeAll, describe, expect, it } from 'vitest';
import type { ErrorBody, HistoryByLabel, HistoryRecord } from '../helpers/api.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';
import { getHistory, ts, valuesOf } from './fixtures.js';

const svc = useService({ HISTORY_MAX_RESULTS: '50' });
let tenant: string;
let token: string;
let otherTenant: string;
let otherToken: string;
let device: string;
let proto: string;
let foreign: string;

const ms = (minute: number) => Date.parse(ts(minute));

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('hie'));
  ({ tenant: otherTenant, token: otherToken } = await svc.freshTenant('hio'));
  const pool = svc.service.pool;
  const t = await createTemplate(pool, tenant, 'sensor', [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'mode', type: 'dynamic', value_type: 'string' },
  ]);
  device = await createDevice(pool, tenant, [t]);
  // A device whose attribute labels are names of Object.prototype members (valid labels).
  const tp = await createTemplate(pool, tenant, 'proto', [
    { label: '__proto__', type: 'dynamic', value_type: 'object' },
    { label: 'constructor', type: 'dynamic', value_type: 'string' },
    { label: 'toString', type: 'dynamic', value_type: 'float' },
  ]);
  proto = await createDevice(pool, tenant, [tp]);
  // A device that exists only in the other tenant, with data.
  const to = await createTemplate(pool, otherTenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  foreign = await createDevice(pool, otherTenant, [to]);

  const rows = [];
  for (let m = 0; m < 10; m++) rows.push({ tenant, device, attr: 'temperature', ts: ts(m), value: String(20 + m) });
  rows.push({ tenant, device, attr: 'mode', ts: ts(3), value: '"eco"' });
  rows.push({ tenant, device, attr: 'mode', ts: ts(7), value: '"boost"' });
  // Values one millisecond either side of minute 2 and minute 4: the bounds must be exact.
  rows.push({ tenant, device, attr: 'mode', ts: '2024-05-01T12:01:59.999000Z', value: '"before"' });
  rows.push({ tenant, device, attr: 'mode', ts: '2024-05-01T12:04:00.001000Z', value: '"after"' });
  rows.push({ tenant, device: proto, attr: '__proto__', ts: ts(1), value: '{"polluted":true}' });
  rows.push({ tenant, device: proto, attr: 'constructor', ts: ts(2), value: '"ctor"' });
  rows.push({ tenant: otherTenant, device: foreign, attr: 'temperature', ts: ts(1), value: '4242.125' });
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

describe('lastN', () => {
  it('repeated: the first value counts', async () => {
    expect(valuesOf((await get('?attr=temperature&lastN=2&lastN=5')).body)).toEqual([29, 28]);
    expect(valuesOf((await get('?attr=temperature&lastN=5&lastN=2')).body)).toEqual([29, 28, 27, 26, 25]);
    // the later value is not read at all, not even checked
    const later = await get('?attr=temperature&lastN=1&lastN=abc');
    expect(later.status).toBe(200);
    expect(valuesOf(later.body)).toEqual([29]);
    const first = await get('?attr=temperature&lastN=abc&lastN=1');
    expect(first.status).toBe(400);
    expect(first.body).toEqual({ message: 'lastN must be a non-negative integer, got "abc"', status: 400 });
  });

  it.each(['9007199254740992', '9007199254740993', '18446744073709551616', '1' + '0'.repeat(400)])(
    'beyond 2^53 − 1 (%s): 400 naming lastN, never 500',
    async (n) => {
      for (const id of [device, 'ffffff']) {
        const res = await get<ErrorBody>(`?attr=temperature&lastN=${n}`, token, id);
        expect(res.status).toBe(400);
        expect(res.body.status).toBe(400);
        expect(res.body.message).toMatch(/^lastN must be /);
        expect(res.body.message).toContain(n.length > 40 ? n.slice(0, 20) : n);
      }
    },
  );

  it('firstN beyond 2^53 − 1 names firstN', async () => {
    const res = await get<ErrorBody>('?attr=temperature&firstN=9007199254740993&lastN=1');
    expect(res.status).toBe(400);
    expect(res.body.message).toMatch(/^firstN must be /);
  });
});

describe('labels named like Object.prototype members', () => {
  it('a device without them: [] for __proto__ and for constructor alone', async () => {
    for (const label of ['__proto__', 'constructor', 'toString', 'hasOwnProperty']) {
      const res = await get(`?attr=${label}`);
      expect(res.status, label).toBe(200);
      expect(res.text, label).toBe('[]');
      expect((await get(`?attr=${label}&lastN=3&dateFrom=${ms(0)}`)).text, label).toBe('[]');
    }
  });

  it('with several attrs: the object has those labels as its own keys with [], nothing else changes', async () => {
    const res = await get<Record<string, unknown>>('?attr=__proto__,constructor,temperature&lastN=1');
    expect(res.status).toBe(200);
    expect(res.text).toContain('"__proto__":[]');
    expect(res.text).toContain('"constructor":[]');
    const body = res.body;
    expect(Object.keys(body)).toEqual(['__proto__', 'constructor', 'temperature']);
    expect(Object.getPrototypeOf(body)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(body, '__proto__')?.value).toEqual([]);
    expect(Object.getOwnPropertyDescriptor(body, 'constructor')?.value).toEqual([]);
    expect(body.temperature).toEqual([{ device_id: device, ts: ts(9), value: 29, attr: 'temperature' }]);
    // repeated, without a label that has data
    const repeated = await get('?attr=__proto__&attr=constructor');
    expect(repeated.status).toBe(200);
    expect(repeated.text).toBe('{"__proto__":[],"constructor":[]}');
    // and the service keeps answering normally afterwards
    expect(valuesOf((await get('?attr=temperature&lastN=1')).body)).toEqual([29]);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('a device that has attributes with those labels answers their values', async () => {
    const one = await get('?attr=__proto__', token, proto);
    expect(one.status).toBe(200);
    expect(one.text).toBe(`[{"device_id":"${proto}","ts":"${ts(1)}","value":{"polluted":true},"attr":"__proto__"}]`);
    expect((await get('?attr=constructor', token, proto)).body).toEqual([
      { device_id: proto, ts: ts(2), value: 'ctor', attr: 'constructor' },
    ]);
    const all = await get<Record<string, unknown>>('', token, proto);
    expect(all.status).toBe(200);
    expect(all.text).toContain(`"__proto__":[{"device_id":"${proto}"`);
    const body = all.body;
    expect(Object.keys(body).sort()).toEqual(['__proto__', 'constructor', 'toString']);
    expect(Object.getPrototypeOf(body)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(body, 'constructor')?.value).toEqual([
      { device_id: proto, ts: ts(2), value: 'ctor', attr: 'constructor' },
    ]);
    expect(Object.getOwnPropertyDescriptor(body, 'toString')?.value).toEqual([]);
    const several = await get('?attr=__proto__,toString', token, proto);
    expect(several.text).toBe(
      `{"__proto__":[{"device_id":"${proto}","ts":"${ts(1)}","value":{"polluted":true},"attr":"__proto__"}],"toString":[]}`,
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('query parameters named __proto__ / constructor are ignored like any unknown parameter', async () => {
    const res = await get('?attr=temperature&lastN=1&__proto__=5&constructor=x&__proto__%5BlastN%5D=3');
    expect(res.status).toBe(200);
    expect(valuesOf(res.body)).toEqual([29]);
  });
});

describe("another tenant's device", () => {
  it('404 No such device on every response path (one attr, several, none), whatever the operators', async () => {
    const notFound = { message: `No such device: ${foreign}`, status: 404 };
    for (const query of [
      '?attr=temperature',
      '?attr=temperature&lastN=1',
      '?attr=temperature,mode',
      '?attr=temperature&attr=temperature',
      '',
      `?firstN=5&dateFrom=${ms(0)}`,
    ]) {
      const res = await get(query, token, foreign);
      expect(res.status, query).toBe(404);
      expect(res.body, query).toEqual(notFound);
      // (the value, not the id: a hexadecimal id may hold any digits)
      expect(res.text, query).not.toContain('4242');
    }
    // its own tenant sees it
    expect((await get('?attr=temperature', otherToken, foreign)).body).toEqual([
      { device_id: foreign, ts: ts(1), value: 4242.125, attr: 'temperature' },
    ]);
  });

  it("and the other way round: the other tenant gets 404 for this tenant's device", async () => {
    for (const query of ['?attr=temperature', '?attr=temperature,mode', '']) {
      const res = await get(query, otherToken, device);
      expect(res.status, query).toBe(404);
      expect(res.body, query).toEqual({ message: `No such device: ${device}`, status: 404 });
    }
  });
});
