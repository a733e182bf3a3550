// GET /history/device/{id}/history with labels that are names of Object.prototype members
// (__proto__, constructor, toString, hasOwnProperty; decisions.md "History", docs/messaging.md
// §6): [] or the values, as the answer's own keys, nothing polluted, for a device without such
// attributes and for one that has them; query parameters of those names are ignored. Rows are
// written directly with known times.
import { beforeAll, describe, expect, it } from 'vitest';
import type { HistoryRecord } from '../helpers/api.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';
import { getHistory, sensorWithTemperatures, ts, valuesOf } from './fixtures.js';

const svc = useService({ HISTORY_MAX_RESULTS: '50' });
let tenant: string;
let token: string;
let device: string;
let proto: string;

const ms = (minute: number) => Date.parse(ts(minute));

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('hie'));
  const pool = svc.service.pool;
  const sensor = await sensorWithTemperatures(pool, tenant);
  device = sensor.device;
  // A device whose attribute labels are names of Object.prototype members (valid labels).
  const tp = await createTemplate(pool, tenant, 'proto', [
    { label: '__proto__', type: 'dynamic', value_type: 'object' },
    { label: 'constructor', type: 'dynamic', value_type: 'string' },
    { label: 'toString', type: 'dynamic', value_type: 'float' },
  ]);
  proto = await createDevice(pool, tenant, [tp]);

  const rows = sensor.rows;
  rows.push({ tenant, device: proto, attr: '__proto__', ts: ts(1), value: '{"polluted":true}' });
  rows.push({ tenant, device: proto, attr: 'constructor', ts: ts(2), value: '"ctor"' });
  await insertHistory(pool, rows);
});

/** The history of `id` (the device by default) as `as` sees it. */
const get = <T = HistoryRecord[]>(query: string, as = token, id = device) => getHistory<T>(svc.base, as, id, query);

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
