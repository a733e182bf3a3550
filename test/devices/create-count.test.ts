// POST /device?count and ?verbose: the count maximum (10000) on both sides, and the spellings of
// both flags that the service takes or refuses. Each describe block works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList, DeviceRef, DevicesCreated, DeviceView, TemplateView } from '../helpers/api.js';
import { stringMatching } from '../helpers/matchers.js';
import { createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { deviceQueries, sensor, VIEW_KEYS } from './fixtures.js';

const svc = useService();
const { idsOf, deviceCount } = deviceQueries(svc);

describe('POST /device?count at the maximum (10000)', () => {
  let token: string;
  let t: TemplateView;
  beforeAll(async () => {
    token = (await svc.freshTenant('bulk')).token;
    t = await createTemplate(svc.base, token, sensor());
  });

  it('count=10001 before anything exists: 400, nothing created', async () => {
    const res = await http('POST', `${svc.base}/device?count=10001`, { token, body: { label: 'x', templates: [t.id] } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'count must be at most 10000', status: 400 });
    expect(await deviceCount(token)).toBe(0);
  });

  it('count=10000: 200, 10000 devices labelled x_0 .. x_9999', { timeout: 120_000 }, async () => {
    const res = await http<DevicesCreated>('POST', `${svc.base}/device?count=10000`, { token, body: { label: 'x', templates: [t.id] } });
    expect(res.status, res.text.slice(0, 200)).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['devices', 'message']);
    expect(res.body.message).toBe('devices created');
    const devices: DeviceRef[] = res.body.devices;
    expect(devices).toHaveLength(10000);
    expect(devices.map((d) => d.label)).toEqual(Array.from({ length: 10000 }, (_, i) => `x_${i}`));
    expect(devices.every((d) => /^[0-9a-f]{6}$/.test(d.id) && Object.keys(d).length === 2)).toBe(true);
    expect(new Set(devices.map((d) => d.id)).size).toBe(10000);
    for (const i of [0, 1, 4999, 9998, 9999]) {
      const view = await getDevice(svc.base, token, devices[i]!.id);
      expect(view.label).toBe(`x_${i}`);
      expect(view.templates).toEqual([String(t.id)]);
      expect(view.attrs[String(t.id)]!.map((a) => a.label)).toEqual(['temperature', 'serial', 'led']);
    }
    const ids = await idsOf(token);
    expect(ids).toHaveLength(10000);
    expect([...ids].sort()).toEqual(devices.map((d) => d.id).sort());
    expect((await http<DeviceList>('GET', `${svc.base}/device?page_size=1000`, { token })).body.pagination).toEqual({
      page: 1,
      total: 10,
      has_next: true,
      next_page: 2,
    });
    expect((await http<DeviceList>('GET', `${svc.base}/device?label=x_9999`, { token })).body.devices.map((d) => d.id)).toEqual([
      devices[9999]!.id,
    ]);
  });

  it('count=10001 afterwards: 400, still 10000 devices', async () => {
    const res = await http('POST', `${svc.base}/device?count=10001`, { token, body: { label: 'y', templates: [t.id] } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'count must be at most 10000', status: 400 });
    expect(await deviceCount(token)).toBe(10000);
    expect(await idsOf(token, 'label=y_')).toEqual([]);
  });
});

describe('POST /device: spellings of verbose and count', () => {
  let token: string;
  let t: TemplateView;
  beforeAll(async () => {
    token = (await svc.freshTenant('qs')).token;
    t = await createTemplate(svc.base, token, sensor());
  });
  const post = (query: string, label = 'v') =>
    http<DevicesCreated<DeviceView>>('POST', `${svc.base}/device${query}`, { token, body: { label, templates: [t.id] } });

  it.each(['?verbose=TRUE', '?verbose=1', '?verbose=True', '?verbose', '?count=%2B1&verbose=TRUE'])(
    '%s: the full device',
    async (query) => {
      const res = await post(query);
      expect(res.status, res.text).toBe(200);
      expect(Object.keys(res.body).sort()).toEqual(['devices', 'message']);
      expect(res.body.message).toBe('device created');
      expect(res.body.devices).toHaveLength(1);
      const d = res.body.devices[0]!;
      expect(Object.keys(d)).toEqual(VIEW_KEYS);
      expect(d).toMatchObject({ label: 'v_0', templates: [String(t.id)] });
      expect(d.attrs[String(t.id)]!.map((a) => a.label)).toEqual(['temperature', 'serial', 'led']);
      expect(d).toEqual(await getDevice(svc.base, token, d.id));
    },
  );

  it.each(['?verbose=yes', '?verbose=false', '?verbose=0', '?verbose=on', '?verbose=2'])('%s: the short form', async (query) => {
    const res = await post(query);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ message: 'devices created', devices: [{ id: stringMatching(/^[0-9a-f]{6}$/), label: 'v_0' }] });
  });

  it.each(['?count=%2B2', '?count=%202%20', '?count=02', '?count=2&verbose=yes'])('%s: two devices', async (query) => {
    const before = await deviceCount(token);
    const res = await post(query, 'two');
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({
      message: 'devices created',
      devices: [
        { id: stringMatching(/^[0-9a-f]{6}$/), label: 'two_0' },
        { id: stringMatching(/^[0-9a-f]{6}$/), label: 'two_1' },
      ],
    });
    expect(await deviceCount(token)).toBe(before + 2);
  });

  it('count=+2 as typed (a bare `+` in a query): two devices too', async () => {
    const before = await deviceCount(token);
    const res = await post('?count=+2', 'plus');
    expect(res.status, res.text).toBe(200);
    expect(res.body.devices.map((d) => d.label)).toEqual(['plus_0', 'plus_1']);
    expect(await deviceCount(token)).toBe(before + 2);
  });

  it.each<[string, string]>([
    ['?count=2.0', 'If provided, count must be integer'],
    ['?count=1e1', 'If provided, count must be integer'],
    ['?count=-0', 'If provided, count must be integer'],
    ['?count=0x2', 'If provided, count must be integer'],
    // beyond 2^53 - 1 the number cannot be held exactly: not an integer, not "too large"
    ['?count=9007199254740993', 'If provided, count must be integer'],
    ['?count=9007199254740991', 'count must be at most 10000'],
    ['?count=%202%20&verbose=1', 'Verbose can only be used for single device creation'],
  ])('%s: 400 %s, nothing created', async (query, message) => {
    const before = await deviceCount(token);
    const res = await post(query, 'bad');
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message, status: 400 });
    expect(await deviceCount(token)).toBe(before);
  });
});
