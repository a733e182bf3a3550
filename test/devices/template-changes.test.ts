// A template update or deletion shows at once in every device built from it (issues 3 and 4).
import { describe, expect, it } from 'vitest';
import type { DeviceList, TemplateList, TemplateRemoved, TemplatesRemoved } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { locator, thermometer } from './fixtures.js';

const svc = useService();

const putTemplate = (id: number, body: unknown) => http('PUT', `${svc.base}/template/${id}`, { token: svc.token, body });

describe('template updates reach devices at once', () => {
  it('a device read just before sees the update just after (the cached view is dropped)', async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    const made = await createDevices(svc.base, svc.token, { label: 'd', templates: [t.id] }, '?count=3');
    for (const d of made) await getDevice(svc.base, svc.token, d.id); // cached now
    const body = structuredClone(thermometer);
    body.attrs[1]!.static_value = 'changed';
    body.attrs.push({ label: 'humidity', type: 'dynamic', value_type: 'float' });
    expect((await putTemplate(t.id, body)).status).toBe(200);
    for (const d of made) {
      const view = await getDevice(svc.base, svc.token, d.id);
      expect(view.attrs[String(t.id)]!.map((a) => a.label)).toEqual(['temperature', 'serial', 'led', 'humidity']);
      expect(view.attrs[String(t.id)]![1]).toMatchObject({ static_value: 'changed', is_static_overridden: false });
    }
    const listed = await http<DeviceList>('GET', `${svc.base}/device?attr=serial=changed`, { token: svc.token });
    expect(listed.body.devices).toHaveLength(3);
  });

  it('overrides of kept attributes survive; those of removed attributes go', async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'o', templates: [t.id], attrs: [{ label: 'serial', static_value: 'SN' }] });
    const body = structuredClone(thermometer);
    body.attrs[1]!.static_value = 'template-value';
    await putTemplate(t.id, body);
    expect((await getDevice(svc.base, svc.token, id)).attrs[String(t.id)]![1]).toMatchObject({ static_value: 'SN', is_static_overridden: true });
    body.attrs[1]!.type = 'dynamic'; // (label, type) no longer present: a new attribute
    await putTemplate(t.id, body);
    const serial = (await getDevice(svc.base, svc.token, id)).attrs[String(t.id)]!.find((a) => a.label === 'serial');
    expect(serial).toMatchObject({ type: 'dynamic', static_value: 'template-value', is_static_overridden: false });
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_overrides WHERE device_id = $1', [id])).toBe(0);
  });

  it('an update that would give a device repeated labels: 400 repeated attributes, nothing changed', async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    const l = await createTemplate(svc.base, svc.token, locator);
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'r', templates: [t.id, l.id] });
    const before = await getDevice(svc.base, svc.token, id);
    const body = structuredClone(thermometer);
    body.attrs.push({ label: 'vendor', type: 'static', value_type: 'string', static_value: 'x' });
    const res = await putTemplate(t.id, body);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: ['a device can not have repeated attributes'], status: 400 });
    expect(await getDevice(svc.base, svc.token, id)).toEqual(before);
    expect((await http('GET', `${svc.base}/template/${t.id}`, { token: svc.token })).body).toEqual(t);
  });
});

describe('template deletion and devices', () => {
  it('DELETE /template/{id} in use: deleted and detached; the device loses its attributes and overrides', async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    const l = await createTemplate(svc.base, svc.token, locator);
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'x', templates: [t.id, l.id], attrs: [{ label: 'serial', static_value: 'S' }] });
    await getDevice(svc.base, svc.token, id);
    const res = await http<TemplateRemoved>('DELETE', `${svc.base}/template/${t.id}`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body.removed.id).toBe(String(t.id));
    const d = await getDevice(svc.base, svc.token, id);
    expect(d.templates).toEqual([String(l.id)]);
    expect(Object.keys(d.attrs)).toEqual([String(l.id)]);
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_overrides WHERE device_id = $1', [id])).toBe(0);
    expect((await http<DeviceList>('GET', `${svc.base}/device/template/${t.id}`, { token: svc.token })).body.devices).toEqual([]);
  });

  it('DELETE /template when any template is in use: 404, nothing removed', async () => {
    const unused = await createTemplate(svc.base, svc.token, { label: 'unused' });
    const before = (await http<TemplateList>('GET', `${svc.base}/template?page_size=1000`, { token: svc.token })).body.templates;
    const res = await http('DELETE', `${svc.base}/template`, { token: svc.token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'Templates cannot be removed as they are being used by devices', status: 404 });
    expect((await http<TemplateList>('GET', `${svc.base}/template?page_size=1000`, { token: svc.token })).body.templates).toEqual(before);
    expect(before.map((t) => t.id)).toContain(unused.id);
  });

  it('once no device uses them, DELETE /template removes them all', async () => {
    await http('DELETE', `${svc.base}/device`, { token: svc.token });
    const res = await http<TemplatesRemoved>('DELETE', `${svc.base}/template`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body.removed.length).toBeGreaterThan(0);
    expect((await http<TemplateList>('GET', `${svc.base}/template`, { token: svc.token })).body.pagination.total).toBe(0);
  });
});
