import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { thermometer } from './fixtures.js';

const svc = useService();
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
  it('a second tenant cannot see, list, change or delete the first tenant\'s devices', async () => {
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

  it('a second tenant cannot build devices from the first tenant\'s templates', async () => {
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
