import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { locator, thermometer } from './fixtures.js';

const svc = useService();
let thermo: TemplateView;
let loc: TemplateView;

beforeAll(async () => {
  thermo = await createTemplate(svc.base, svc.token, thermometer);
  loc = await createTemplate(svc.base, svc.token, locator);
  await createDevices(svc.base, svc.token, { id: 'b1', label: 'one', templates: [thermo.id] });
  await createDevices(svc.base, svc.token, {
    id: 'b2',
    label: 'two',
    templates: [loc.id],
    attrs: [{ label: 'vendor', static_value: 'initech' }],
  });
});

describe('internal endpoints', () => {
  it('GET /internal/device/{id}: the device, on the internal listener, with the same token', async () => {
    const res = await http('GET', `${svc.internal}/internal/device/b2`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual(await getDevice(svc.base, svc.token, 'b2'));
  });

  it('GET /internal/device: pages, filters and idsOnly as GET /device, without attr_type', async () => {
    const res = await http('GET', `${svc.internal}/internal/device?page_size=1&page_num=2`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      devices: [await getDevice(svc.base, svc.token, 'b2')],
      pagination: { page: 2, total: 2, has_next: false, next_page: null },
    });
    expect(
      (await http<DeviceList>('GET', `${svc.internal}/internal/device?attr=vendor=initech`, { token: svc.token })).body.devices.map(
        (d) => d.id,
      ),
    ).toEqual(['b2']);
    expect(
      (await http<DeviceList>('GET', `${svc.internal}/internal/device?label=one`, { token: svc.token })).body.devices.map((d) => d.id),
    ).toEqual(['b1']);
    expect((await http('GET', `${svc.internal}/internal/device?idsOnly=true&sortBy=label`, { token: svc.token })).body).toEqual([
      'b1',
      'b2',
    ]);
    // attr_type is not a filter here
    expect((await http('GET', `${svc.internal}/internal/device?idsOnly&attr_type=geopoint`, { token: svc.token })).body).toEqual([
      'b1',
      'b2',
    ]);
    expect((await http('GET', `${svc.internal}/internal/device?page_num=0`, { token: svc.token })).body).toEqual({
      message: 'Page numbers must be greater than 1',
      status: 400,
    });
  });

  it('unknown device: 404', async () => {
    const res = await http('GET', `${svc.internal}/internal/device/ffffff`, { token: svc.token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'No such device: ffffff', status: 404 });
  });

  it('the public listener answers 404 for them', async () => {
    for (const path of ['/internal/device', '/internal/device/b1']) {
      const res = await http('GET', `${svc.base}${path}`, { token: svc.token });
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
    expect((await http('GET', `${svc.internal}/device/b1`, { token: svc.token })).status).toBe(404);
  });
});
