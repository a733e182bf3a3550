import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, type TestService } from '../helpers/service.js';
import { createDevices, createTemplate, getDevice, thermometer } from './fixtures.js';

let svc: TestService;
let token: string;
let thermo: any;

beforeAll(async () => {
  svc = await startTestService();
  token = await login(svc.base);
  thermo = await createTemplate(svc.base, token, thermometer);
});
afterAll(() => svc?.stop());

describe('DELETE /device/{id}', () => {
  it('removes the device: {removed_device, result}', async () => {
    const [{ id }] = await createDevices(svc.base, token, { label: 'd', templates: [thermo.id], attrs: [{ label: 'serial', static_value: 'S' }] });
    const view = await getDevice(svc.base, token, id);
    const res = await http('DELETE', `${svc.base}/device/${id}`, { token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed_device: view, result: 'ok' });
    expect((await http('GET', `${svc.base}/device/${id}`, { token })).status).toBe(404);
    const left = await svc.service.pool.query('SELECT count(*)::int AS n FROM device_overrides WHERE device_id = $1', [id]);
    expect(left.rows[0].n).toBe(0);
  });

  it('publishes devices.removed (the messaging side closes the MQTT session on it)', async () => {
    const [{ id }] = await createDevices(svc.base, token, { label: 'd', templates: [] });
    const seen: unknown[] = [];
    const off = svc.service.events.on((e) => seen.push(e));
    await http('DELETE', `${svc.base}/device/${id}`, { token });
    off();
    expect(seen).toContainEqual({ type: 'devices.removed', tenant: 'admin', deviceIds: [id] });
  });

  it.each(['ffffff', 'not-an-id'])('unknown device %s: 404', async (id) => {
    const res = await http('DELETE', `${svc.base}/device/${id}`, { token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such device: ${id}`, status: 404 });
  });
});

describe('DELETE /device', () => {
  it('removes every device: {removed_devices, result}, and publishes devices.removed', async () => {
    const made = await createDevices(svc.base, token, { label: 'all', templates: [thermo.id] }, '?count=3');
    const views = await Promise.all(made.map((d) => getDevice(svc.base, token, d.id)));
    const seen: any[] = [];
    const off = svc.service.events.on((e) => seen.push(e));
    const res = await http('DELETE', `${svc.base}/device`, { token });
    off();
    expect(res.status).toBe(200);
    expect(res.body.result).toBe('ok');
    expect([...res.body.removed_devices].sort((a: any, b: any) => a.id.localeCompare(b.id))).toEqual(
      [...views].sort((a, b) => a.id.localeCompare(b.id)),
    );
    expect(seen.find((e) => e.type === 'devices.removed').deviceIds.sort()).toEqual(made.map((d) => d.id).sort());
    for (const d of made) expect((await http('GET', `${svc.base}/device/${d.id}`, { token })).status).toBe(404);
    expect(await http('DELETE', `${svc.base}/device`, { token }).then((r) => r.body)).toEqual({ removed_devices: [], result: 'ok' });
  });
});
