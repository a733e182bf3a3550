import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, type TestService } from '../helpers/service.js';
import { createDevices, createTemplate, getDevice, locator, thermometer } from './fixtures.js';

let svc: TestService;
let token: string;
let thermo: any;
let loc: any;

beforeAll(async () => {
  svc = await startTestService();
  token = await login(svc.base);
  thermo = await createTemplate(svc.base, token, thermometer);
  loc = await createTemplate(svc.base, token, locator);
  await createDevices(svc.base, token, { id: 'b1', label: 'one', templates: [thermo.id] });
  await createDevices(svc.base, token, { id: 'b2', label: 'two', templates: [loc.id], attrs: [{ label: 'vendor', static_value: 'initech' }] });
});
afterAll(() => svc?.stop());

describe('internal endpoints', () => {
  it('GET /internal/device/{id}: the device, on the internal listener, with the same token', async () => {
    const res = await http('GET', `${svc.internal}/internal/device/b2`, { token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual(await getDevice(svc.base, token, 'b2'));
  });

  it('GET /internal/device: pages, filters and idsOnly as GET /device, without attr_type', async () => {
    const res = await http('GET', `${svc.internal}/internal/device?page_size=1&page_num=2`, { token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ devices: [await getDevice(svc.base, token, 'b2')], pagination: { page: 2, total: 2, has_next: false, next_page: null } });
    expect((await http('GET', `${svc.internal}/internal/device?attr=vendor=initech`, { token })).body.devices.map((d: any) => d.id)).toEqual(['b2']);
    expect((await http('GET', `${svc.internal}/internal/device?label=one`, { token })).body.devices.map((d: any) => d.id)).toEqual(['b1']);
    expect((await http('GET', `${svc.internal}/internal/device?idsOnly=true&sortBy=label`, { token })).body).toEqual(['b1', 'b2']);
    // attr_type is not a filter here
    expect((await http('GET', `${svc.internal}/internal/device?idsOnly&attr_type=geopoint`, { token })).body).toEqual(['b1', 'b2']);
    expect((await http('GET', `${svc.internal}/internal/device?page_num=0`, { token })).body).toEqual({ message: 'Page numbers must be greater than 1', status: 400 });
  });

  it('unknown device: 404', async () => {
    const res = await http('GET', `${svc.internal}/internal/device/ffffff`, { token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'No such device: ffffff', status: 404 });
  });

  it('the public listener answers 404 for them', async () => {
    for (const path of ['/internal/device', '/internal/device/b1']) {
      const res = await http('GET', `${svc.base}${path}`, { token });
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ message: 'Invalid endpoint requested', status: 404 });
    }
  });

  it('they need the token', async () => {
    const res = await http('GET', `${svc.internal}/internal/device/b1`);
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ message: 'No authorization token has been supplied', status: 401 });
    expect((await http('GET', `${svc.internal}/internal/device`, { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
  });

  it('the public device routes are not served on the internal listener', async () => {
    expect((await http('GET', `${svc.internal}/device/b1`, { token })).status).toBe(404);
  });
});
