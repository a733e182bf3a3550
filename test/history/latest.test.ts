// POST /history/latest and the `lastValues` flag of GET /device and GET /device/{id}
// (docs/api.md "Latest values"): the latest value of each pair, also when it lies before the
// history's horizon (the closed region), other tenants' devices absent, the 1000-device limit,
// and the device views unchanged without the flag.
import { beforeAll, describe, expect, it } from 'vitest';
import type { ErrorBody } from '../helpers/api.js';
import { createDevice, createDevices, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';

const svc = useService();
let tenant: string;
let token: string;
let otherToken: string;
let template: number;
let a: string;
let b: string;
let quiet: string;
let foreign: string;

type Latest = { device_id: string; attr: string; ts: string; value: unknown };
const latest = <T = Latest[]>(body: unknown, as = token) => http<T>('POST', `${svc.base}/history/latest`, { token: as, body });

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('lat'));
  const other = await svc.freshTenant('lao');
  otherToken = other.token;
  const pool = svc.service.pool;
  template = await createTemplate(pool, tenant, 'sensor', [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'mode', type: 'dynamic', value_type: 'string' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: 'S' },
  ]);
  a = await createDevice(pool, tenant, [template]);
  b = await createDevice(pool, tenant, [template]);
  quiet = await createDevice(pool, tenant, [template]);
  const ot = await createTemplate(pool, other.tenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  foreign = await createDevice(pool, other.tenant, [ot]);
  const now = Date.now();
  const iso = (msAgo: number) => new Date(now - msAgo).toISOString();
  await insertHistory(pool, [
    // a: recent values (the open region)
    { tenant, device: a, attr: 'temperature', ts: iso(60_000), value: '20' },
    { tenant, device: a, attr: 'temperature', ts: iso(1_000), value: '21.5' },
    { tenant, device: a, attr: 'mode', ts: iso(5_000), value: '"eco"' },
    // b: only old values, long before the horizon (read through its series' span)
    { tenant, device: b, attr: 'temperature', ts: '2024-01-01T00:00:00Z', value: '5' },
    { tenant, device: b, attr: 'temperature', ts: '2024-01-02T00:00:00Z', value: '6' },
    { tenant: other.tenant, device: foreign, attr: 'temperature', ts: iso(1_000), value: '99' },
  ]);
  // Move the horizon past b's rows, as the service does once a chunk interval: the spans cover them.
  await pool.query(`SELECT history_note_before(now() - interval '2 days'), history_close_before(now() - interval '2 days')`);
});

const byPair = (rows: Latest[]) => Object.fromEntries(rows.map((r) => [`${r.device_id}/${r.attr}`, r.value]));

describe('POST /history/latest', () => {
  it('by ids: the latest value of each pair that has one; other tenants’ and unknown ids absent', async () => {
    const r = await latest({ devices: [a, b, quiet, foreign, 'ffffff'], attrs: ['temperature', 'mode'] });
    expect(r.status).toBe(200);
    expect(byPair(r.body)).toEqual({ [`${a}/temperature`]: 21.5, [`${a}/mode`]: 'eco', [`${b}/temperature`]: 6 });
    expect(r.body).toHaveLength(3);
    const bRow = r.body.find((x) => x.device_id === b)!;
    expect(bRow).toEqual({ device_id: b, attr: 'temperature', ts: '2024-01-02T00:00:00.000000Z', value: 6 });
    // ordered by device id, then label
    const keys = r.body.map((x) => `${x.device_id}/${x.attr}`);
    expect(keys).toEqual([...keys].sort());
  });

  it('by template, attrs absent: every attribute of every device of the template', async () => {
    const r = await latest({ template });
    expect(byPair(r.body)).toEqual({ [`${a}/temperature`]: 21.5, [`${a}/mode`]: 'eco', [`${b}/temperature`]: 6 });
  });

  it('a label the device no longer has answers nothing, named or not (its rows stay in history)', async () => {
    const pool = svc.service.pool;
    const t = await createTemplate(pool, tenant, 'before', [{ label: 'lbl', type: 'dynamic', value_type: 'string' }]);
    const d = await createDevice(pool, tenant, [t]);
    await insertHistory(pool, [{ tenant, device: d, attr: 'lbl', ts: new Date().toISOString(), value: '"x"' }]);
    expect(byPair((await latest({ devices: [d], attrs: ['lbl'] })).body)).toEqual({ [`${d}/lbl`]: 'x' });
    const put = await http('PUT', `${svc.base}/template/${t}`, {
      token,
      body: { label: 'after', attrs: [{ label: 'other', type: 'dynamic', value_type: 'string' }] },
    });
    expect(put.status).toBe(200);
    expect((await latest({ devices: [d], attrs: ['lbl'] })).body).toEqual([]);
    expect((await latest({ devices: [d] })).body).toEqual([]);
  });

  it('another tenant sees only its own device', async () => {
    const r = await latest({ devices: [a, b, foreign], attrs: ['temperature'] }, otherToken);
    expect(byPair(r.body)).toEqual({ [`${foreign}/temperature`]: 99 });
  });

  it('1000 devices answer; 1001 are refused (400), by ids or by template', async () => {
    const ids = Array.from({ length: 1000 }, (_, i) => `x${i}`);
    expect((await latest({ devices: [...ids, a], attrs: ['temperature'] })).body).toEqual({
      message: 'At most 1000 devices per request, got 1001',
      status: 400,
    });
    expect((await latest({ devices: [...ids.slice(1), a], attrs: ['temperature'] })).status).toBe(200);
    // (in a tenant of its own, so that the device list below stays small)
    const pool = svc.service.pool;
    const many = await svc.freshTenant('lab');
    const big = await createTemplate(pool, many.tenant, 'big', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
    await createDevices(pool, many.tenant, big, ids.map((_, i) => `b${i.toString(16).padStart(5, '0')}`).concat(['bfffff']));
    const r = await latest<ErrorBody>({ template: big }, many.token);
    expect(r.body).toEqual({ message: `At most 1000 devices per request; template ${big} has 1001`, status: 400 });
  });

  it('an id repeated counts once: 1000 different ids in 1001 entries answer, and the API description allows them', async () => {
    const ids = Array.from({ length: 999 }, (_, i) => `x${i}`);
    const r = await latest({ devices: [...ids, a, a], attrs: ['temperature'] });
    expect(r.status).toBe(200);
    expect(byPair(r.body)).toEqual({ [`${a}/temperature`]: 21.5 });
    // (the document said maxItems 1000: a client that validates its request refused what the service answers)
    const doc = await http<{ components: { schemas: Record<string, { properties: Record<string, { maxItems?: number }> }> } }>(
      'GET',
      `${svc.base}/openapi.json`,
    );
    expect(doc.body.components.schemas['history.latest.body']!.properties.devices!.maxItems).toBeUndefined();
  });

  it.each([
    [{ attrs: ['temperature'] }, 'Give exactly one of "devices" and "template"'],
    [{ devices: [], template: 1 }, 'Give exactly one of "devices" and "template"'],
    [{ devices: 'abc' }, '"devices" must be a list of device ids'],
    [{ devices: ['abc'], attrs: 'temperature' }, '"attrs" must be a list of attribute labels'],
    [{ template: 'x' }, '"template" must be a template id (an integer)'],
    [[1, 2], 'The body must be an object with "devices" (a list of device ids) or "template" (a template id), and "attrs"'],
    // A misspelt key would otherwise change the answer quietly (here: every attribute instead of one).
    [{ devices: ['abc'], attr: ['temperature'] }, 'Unknown key "attr" (POST /history/latest takes "devices", "template" and "attrs")'],
  ])('%j: 400', async (body, message) => {
    expect((await latest<ErrorBody>(body)).body).toEqual({ message, status: 400 });
  });
});

describe('lastValues on the device views', () => {
  it('GET /device/{id}: without the flag exactly as before; with it, last_values added', async () => {
    const plain = await http('GET', `${svc.base}/device/${a}`, { token });
    const off = await http('GET', `${svc.base}/device/${a}?lastValues=false`, { token });
    expect(off.text).toBe(plain.text);
    expect(plain.text).not.toContain('last_values');
    const on = await http<Record<string, unknown>>('GET', `${svc.base}/device/${a}?lastValues=true`, { token });
    const { last_values, ...rest } = on.body;
    expect(rest).toEqual(plain.body);
    const lv = last_values as Record<string, { ts: string; value: unknown }>;
    expect(Object.keys(lv).sort()).toEqual(['mode', 'temperature']);
    expect(lv.temperature!.value).toBe(21.5);
    expect(lv.temperature!.ts).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(lv.mode!.value).toBe('eco');
    const bare = await http<{ last_values: unknown }>('GET', `${svc.base}/device/${quiet}?lastValues`, { token });
    expect(bare.body.last_values).toEqual({});
  });

  it('GET /device: the page with each device’s last_values; without the flag unchanged', async () => {
    const q = `label=&page_size=50&sortBy=label`;
    const plain = await http('GET', `${svc.base}/device?${q}`, { token });
    const on = await http<{ devices: Array<{ id: string; last_values: Record<string, { value: unknown }> }> }>(
      'GET',
      `${svc.base}/device?${q}&lastValues=1`,
      { token },
    );
    const stripped = { ...on.body, devices: on.body.devices.map(({ last_values: _, ...d }) => d) };
    expect(stripped).toEqual(plain.body);
    expect(plain.text).not.toContain('last_values');
    const lv = Object.fromEntries(on.body.devices.map((d) => [d.id, d.last_values]));
    expect(lv[b]).toEqual({ temperature: { ts: '2024-01-02T00:00:00.000000Z', value: 6 } });
    expect(lv[a]!.temperature!.value).toBe(21.5);
  });

  it('GET /device/template/{id}: the same flag, the same values; without it unchanged', async () => {
    const url = `${svc.base}/device/template/${template}?page_size=50`;
    const plain = await http('GET', url, { token });
    const on = await http<{ devices: Array<{ id: string; last_values: Record<string, { value: unknown }> }> }>('GET', `${url}&lastValues`, {
      token,
    });
    const stripped = { ...on.body, devices: on.body.devices.map(({ last_values: _, ...d }) => d) };
    expect(stripped).toEqual(plain.body);
    expect(plain.text).not.toContain('last_values');
    const lv = Object.fromEntries(on.body.devices.map((d) => [d.id, d.last_values]));
    expect(Object.keys(lv).sort()).toEqual([a, b, quiet].sort());
    expect(lv[b]).toEqual({ temperature: { ts: '2024-01-02T00:00:00.000000Z', value: 6 } });
    expect(lv[a]!.mode!.value).toBe('eco');
    expect(lv[quiet]).toEqual({});
  });
});
