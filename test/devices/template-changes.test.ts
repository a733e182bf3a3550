// A template update or deletion shows at once in every device built from it (issues 3 and 4).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, type TestService } from '../helpers/service.js';
import { createDevices, createTemplate, getDevice, locator, thermometer } from './fixtures.js';

let svc: TestService;
let token: string;

beforeAll(async () => {
  svc = await startTestService();
  token = await login(svc.base);
});
afterAll(() => svc?.stop());

const putTemplate = (id: number, body: unknown) => http('PUT', `${svc.base}/template/${id}`, { token, body });

describe('template updates reach devices at once', () => {
  it('a device read just before sees the update just after (the cached view is dropped)', async () => {
    const t = await createTemplate(svc.base, token, thermometer);
    const made = await createDevices(svc.base, token, { label: 'd', templates: [t.id] }, '?count=3');
    for (const d of made) await getDevice(svc.base, token, d.id); // cached now
    const body = structuredClone(thermometer);
    body.attrs[1]!.static_value = 'changed';
    body.attrs.push({ label: 'humidity', type: 'dynamic', value_type: 'float' } as any);
    expect((await putTemplate(t.id, body)).status).toBe(200);
    for (const d of made) {
      const view = await getDevice(svc.base, token, d.id);
      expect(view.attrs[String(t.id)].map((a: any) => a.label)).toEqual(['temperature', 'serial', 'led', 'humidity']);
      expect(view.attrs[String(t.id)][1]).toMatchObject({ static_value: 'changed', is_static_overridden: false });
    }
    const listed = await http('GET', `${svc.base}/device?attr=serial=changed`, { token });
    expect(listed.body.devices).toHaveLength(3);
  });

  it('overrides of kept attributes survive; those of removed attributes go', async () => {
    const t = await createTemplate(svc.base, token, thermometer);
    const [{ id }] = await createDevices(svc.base, token, { label: 'o', templates: [t.id], attrs: [{ label: 'serial', static_value: 'SN' }] });
    const body = structuredClone(thermometer);
    body.attrs[1]!.static_value = 'template-value';
    await putTemplate(t.id, body);
    expect((await getDevice(svc.base, token, id)).attrs[String(t.id)][1]).toMatchObject({ static_value: 'SN', is_static_overridden: true });
    body.attrs[1]!.type = 'dynamic'; // (label, type) no longer present: a new attribute
    await putTemplate(t.id, body);
    const serial = (await getDevice(svc.base, token, id)).attrs[String(t.id)].find((a: any) => a.label === 'serial');
    expect(serial).toMatchObject({ type: 'dynamic', static_value: 'template-value', is_static_overridden: false });
    const left = await svc.service.pool.query('SELECT count(*)::int AS n FROM device_overrides WHERE device_id = $1', [id]);
    expect(left.rows[0].n).toBe(0);
  });

  it('an update that would give a device repeated labels: 400 repeated attributes, nothing changed', async () => {
    const t = await createTemplate(svc.base, token, thermometer);
    const l = await createTemplate(svc.base, token, locator);
    const [{ id }] = await createDevices(svc.base, token, { label: 'r', templates: [t.id, l.id] });
    const before = await getDevice(svc.base, token, id);
    const body = structuredClone(thermometer);
    body.attrs.push({ label: 'vendor', type: 'static', value_type: 'string', static_value: 'x' } as any);
    const res = await putTemplate(t.id, body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: ['a device can not have repeated attributes'], status: 400 });
    expect(await getDevice(svc.base, token, id)).toEqual(before);
    expect((await http('GET', `${svc.base}/template/${t.id}`, { token })).body).toEqual(t);
  });
});

describe('template deletion and devices', () => {
  it('DELETE /template/{id} in use: deleted and detached; the device loses its attributes and overrides', async () => {
    const t = await createTemplate(svc.base, token, thermometer);
    const l = await createTemplate(svc.base, token, locator);
    const [{ id }] = await createDevices(svc.base, token, { label: 'x', templates: [t.id, l.id], attrs: [{ label: 'serial', static_value: 'S' }] });
    await getDevice(svc.base, token, id);
    const res = await http('DELETE', `${svc.base}/template/${t.id}`, { token });
    expect(res.status).toBe(200);
    expect(res.body.removed.id).toBe(String(t.id));
    const d = await getDevice(svc.base, token, id);
    expect(d.templates).toEqual([String(l.id)]);
    expect(Object.keys(d.attrs)).toEqual([String(l.id)]);
    const left = await svc.service.pool.query('SELECT count(*)::int AS n FROM device_overrides WHERE device_id = $1', [id]);
    expect(left.rows[0].n).toBe(0);
    expect((await http('GET', `${svc.base}/device/template/${t.id}`, { token })).body.devices).toEqual([]);
  });

  it('DELETE /template when any template is in use: 404, nothing removed', async () => {
    const unused = await createTemplate(svc.base, token, { label: 'unused' });
    const before = (await http('GET', `${svc.base}/template?page_size=1000`, { token })).body.templates;
    const res = await http('DELETE', `${svc.base}/template`, { token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'Templates cannot be removed as they are being used by devices', status: 404 });
    expect((await http('GET', `${svc.base}/template?page_size=1000`, { token })).body.templates).toEqual(before);
    expect(before.map((t: any) => t.id)).toContain(unused.id);
  });

  it('once no device uses them, DELETE /template removes them all', async () => {
    await http('DELETE', `${svc.base}/device`, { token });
    const res = await http('DELETE', `${svc.base}/template`, { token });
    expect(res.status).toBe(200);
    expect(res.body.removed.length).toBeGreaterThan(0);
    expect((await http('GET', `${svc.base}/template`, { token })).body.pagination.total).toBe(0);
  });
});
