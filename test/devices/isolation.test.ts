import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, tenantToken, type TestService } from '../helpers/service.js';
import { createDevices, createTemplate, getDevice, thermometer } from './fixtures.js';

let svc: TestService;
let first: string;
let second: string;
let thermo: any;

beforeAll(async () => {
  svc = await startTestService();
  const admin = await login(svc.base);
  first = await tenantToken(svc.base, admin, 'tenant-one');
  second = await tenantToken(svc.base, admin, 'tenant-two');
  thermo = await createTemplate(svc.base, first, thermometer);
  await createDevices(svc.base, first, { id: 'cafe', label: 'mine', templates: [thermo.id] });
});
afterAll(() => svc?.stop());

describe('tenant isolation of devices', () => {
  it('a second tenant cannot see, list, change or delete the first tenant\'s devices', async () => {
    const notFound = { message: 'No such device: cafe', status: 404 };
    expect((await http('GET', `${svc.base}/device/cafe`, { token: second })).body).toEqual(notFound);
    expect((await http('GET', `${svc.internal}/internal/device/cafe`, { token: second })).body).toEqual(notFound);
    expect((await http('PUT', `${svc.base}/device/cafe`, { token: second, body: { label: 'x', templates: [] } })).body).toEqual(notFound);
    expect((await http('DELETE', `${svc.base}/device/cafe`, { token: second })).body).toEqual(notFound);
    expect((await http('GET', `${svc.base}/device?idsOnly`, { token: second })).body).toEqual([]);
    expect((await http('GET', `${svc.base}/device`, { token: second })).body.devices).toEqual([]);
    expect((await http('GET', `${svc.internal}/internal/device`, { token: second })).body.devices).toEqual([]);
    expect((await http('GET', `${svc.base}/device/template/${thermo.id}`, { token: second })).body.devices).toEqual([]);
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
