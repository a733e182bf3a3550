// Tenant isolation of devices: another tenant's devices (and templates) are unknown to every
// device route, and the same id in two tenants names two devices.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList, DevicesRemoved, DeviceUpdated, DeviceView, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { deviceQueries, sensor, thermometer } from './fixtures.js';

const svc = useService();
const { idsOf } = deviceQueries(svc);
let first: string;
let second: string;
let thermo: TemplateView;

beforeAll(async () => {
  first = (await svc.freshTenant('tenant-one')).token;
  second = (await svc.freshTenant('tenant-two')).token;
  thermo = await createTemplate(svc.base, first, thermometer);
  await createDevices(svc.base, first, { id: 'cafe', label: 'mine', templates: [thermo.id] });
});

describe('tenant isolation of devices', () => {
  it("a second tenant cannot see, list, change or delete the first tenant's devices", async () => {
    const notFound = { message: 'No such device: cafe', status: 404 };
    expect((await http('GET', `${svc.base}/device/cafe`, { token: second })).body).toEqual(notFound);
    expect((await http('GET', `${svc.internal}/internal/device/cafe`, { token: second })).body).toEqual(notFound);
    expect((await http('PUT', `${svc.base}/device/cafe`, { token: second, body: { label: 'x', templates: [] } })).body).toEqual(notFound);
    expect((await http('DELETE', `${svc.base}/device/cafe`, { token: second })).body).toEqual(notFound);
    expect((await http('GET', `${svc.base}/device?idsOnly`, { token: second })).body).toEqual([]);
    expect((await http<DeviceList>('GET', `${svc.base}/device`, { token: second })).body.devices).toEqual([]);
    expect((await http<DeviceList>('GET', `${svc.internal}/internal/device`, { token: second })).body.devices).toEqual([]);
    expect((await http<DeviceList>('GET', `${svc.base}/device/template/${thermo.id}`, { token: second })).body.devices).toEqual([]);
    expect((await http('DELETE', `${svc.base}/device`, { token: second })).body).toEqual({ removed_devices: [], result: 'ok' });
    expect((await getDevice(svc.base, first, 'cafe')).label).toBe('mine_0');
  });

  it("a second tenant cannot build devices from the first tenant's templates", async () => {
    const res = await http('POST', `${svc.base}/device`, { token: second, body: { label: 'x', templates: [thermo.id] } });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such template: ${thermo.id}`, status: 404 });
  });

  it('the same id in two tenants names two devices', async () => {
    const other = await createTemplate(svc.base, second, { label: 'other', attrs: [] });
    await createDevices(svc.base, second, { id: 'cafe', label: 'theirs', templates: [other.id] });
    expect((await getDevice(svc.base, second, 'cafe')).label).toBe('theirs_0');
    expect((await getDevice(svc.base, first, 'cafe')).label).toBe('mine_0');
    await http('DELETE', `${svc.base}/device/cafe`, { token: second });
    expect((await getDevice(svc.base, first, 'cafe')).label).toBe('mine_0');
  });
});

describe('tenant isolation of PUT and DELETE', () => {
  let a: string;
  let b: string;
  let tA: TemplateView;
  let tB: TemplateView;
  let aViews: DeviceView[];
  beforeAll(async () => {
    a = (await svc.freshTenant('iso-a')).token;
    b = (await svc.freshTenant('iso-b')).token;
    tA = await createTemplate(svc.base, a, sensor());
    tB = await createTemplate(svc.base, b, { label: 'Other', attrs: [{ label: 'level', type: 'dynamic', value_type: 'integer' }] });
    await createDevices(svc.base, a, { id: 'beef', label: 'a-beef', templates: [tA.id], attrs: [{ label: 'serial', static_value: 'A' }] });
    await createDevices(svc.base, a, { id: 'f00d', label: 'a-food', templates: [tA.id] });
    await createDevices(svc.base, a, { label: 'a-more', templates: [tA.id] }, '?count=3');
    await createDevices(svc.base, b, { id: 'beef', label: 'b-beef', templates: [tB.id] });
    aViews = await Promise.all((await idsOf(a)).map((id) => getDevice(svc.base, a, id)));
    expect(aViews).toHaveLength(5);
  });
  const aUnchanged = async () => {
    expect(await Promise.all(aViews.map((v) => getDevice(svc.base, a, v.id)))).toEqual(aViews);
    expect(await idsOf(a)).toEqual(aViews.map((v) => v.id));
  };

  it("PUT on the shared id changes the caller's device only", async () => {
    const res = await http<DeviceUpdated>('PUT', `${svc.base}/device/beef`, { token: b, body: { label: 'b-renamed', templates: [tB.id] } });
    expect(res.status, res.text).toBe(200);
    expect(res.body.device).toMatchObject({ id: 'beef', label: 'b-renamed', templates: [String(tB.id)] });
    expect(await getDevice(svc.base, b, 'beef')).toEqual(res.body.device);
    await aUnchanged();
  });

  it("PUT on an id only the other tenant has: 404; with the other tenant's template: 404 No such template", async () => {
    const res = await http('PUT', `${svc.base}/device/f00d`, { token: b, body: { label: 'stolen', templates: [tB.id] } });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'No such device: f00d', status: 404 });
    const viaTemplate = await http('PUT', `${svc.base}/device/beef`, { token: b, body: { label: 'x', templates: [tA.id] } });
    expect(viaTemplate.status).toBe(404);
    expect(viaTemplate.body).toEqual({ message: `No such template: ${tA.id}`, status: 404 });
    await aUnchanged();
  });

  it("DELETE on an id only the other tenant has: 404; on the shared id: the caller's device only", async () => {
    const miss = await http('DELETE', `${svc.base}/device/f00d`, { token: b });
    expect(miss.status).toBe(404);
    expect(miss.body).toEqual({ message: 'No such device: f00d', status: 404 });
    const bView = await getDevice(svc.base, b, 'beef');
    const res = await http('DELETE', `${svc.base}/device/beef`, { token: b });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed_device: bView, result: 'ok' });
    expect((await http('GET', `${svc.base}/device/beef`, { token: b })).status).toBe(404);
    await aUnchanged();
  });

  it("DELETE /device removes the caller's devices only", async () => {
    const made = await createDevices(svc.base, b, { label: 'b-many', templates: [tB.id] }, '?count=2');
    await createDevices(svc.base, b, { id: 'beef', label: 'b-again', templates: [] });
    const res = await http<DevicesRemoved>('DELETE', `${svc.base}/device`, { token: b });
    expect(res.status).toBe(200);
    expect(res.body.result).toBe('ok');
    expect(res.body.removed_devices.map((d) => d.id).sort()).toEqual([...made.map((d) => d.id), 'beef'].sort());
    expect(await idsOf(b)).toEqual([]);
    await aUnchanged();
  });
});
