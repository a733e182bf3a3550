// Odd or unknown ids on PUT and DELETE /device/{id}: 404 naming the id as given (the body
// checked first), and nothing changed. Works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceRemoved, DeviceUpdated, DeviceView, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { deviceQueries, NOT_JSON, sensor } from './fixtures.js';

const svc = useService();
const { deviceCount } = deviceQueries(svc);

describe('odd or unknown ids on PUT and DELETE /device/{id}', () => {
  let token: string;
  let t: TemplateView;
  let keep: DeviceView;
  beforeAll(async () => {
    token = (await svc.freshTenant('ids')).token;
    t = await createTemplate(svc.base, token, sensor());
    await createDevices(svc.base, token, { id: 'ab', label: 'keep', templates: [t.id] });
    keep = await getDevice(svc.base, token, 'ab');
  });

  // [as written in the path, as the message names it]
  const ids: Array<[string, string]> = [
    ['zz', 'zz'],
    ['%20', ' '],
    ['a'.repeat(100), 'a'.repeat(100)],
    ['ffffff', 'ffffff'],
    ['AB', 'AB'], // ids are looked up as given: not the device `ab`
    ['ab%20', 'ab '],
    ['%25', '%'],
    ['%2F', '/'],
    ['%00', '\u0000'],
    ['%FF', '%FF'], // not a UTF-8 escape: taken as written
  ];

  it.each(ids)('PUT /device/%s with a valid body: 404', async (path, id) => {
    const count = await deviceCount(token);
    const res = await http<DeviceUpdated>('PUT', `${svc.base}/device/${path}`, { token, body: { label: 'x', templates: [t.id] } });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such device: ${id}`, status: 404 });
    expect(await deviceCount(token)).toBe(count);
    expect(await getDevice(svc.base, token, 'ab')).toEqual(keep);
  });

  it.each(ids)('DELETE /device/%s: 404', async (path, id) => {
    const count = await deviceCount(token);
    const res = await http<DeviceRemoved>('DELETE', `${svc.base}/device/${path}`, { token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such device: ${id}`, status: 404 });
    expect(await deviceCount(token)).toBe(count);
    expect(await getDevice(svc.base, token, 'ab')).toEqual(keep);
  });

  it.each(ids)('PUT /device/%s with an invalid body: 400 (the body is checked first)', async (path) => {
    const missing = await http<DeviceUpdated>('PUT', `${svc.base}/device/${path}`, { token, body: { templates: [] } });
    expect(missing.status).toBe(400);
    expect(missing.body).toEqual({ message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } });
    const wrongType = await http<DeviceUpdated>('PUT', `${svc.base}/device/${path}`, { token, body: { label: 'x', templates: 'all' } });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body).toEqual({ message: 'failed to parse input', errors: { templates: ['Not a valid list.'] } });
    const notJson = await http<DeviceUpdated>('PUT', `${svc.base}/device/${path}`, {
      token,
      rawBody: '{"label":',
      headers: { 'content-type': 'application/json' },
    });
    expect(notJson.status).toBe(400);
    expect(notJson.body).toEqual(NOT_JSON);
    expect(await getDevice(svc.base, token, 'ab')).toEqual(keep);
  });
});
