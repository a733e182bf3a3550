// page_size above the maximum (1000) on the device lists, and which pagination error answers
// when several apply. Works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { sensor } from './fixtures.js';

const svc = useService();

describe('page_size above the maximum (1000), and the pagination error order', () => {
  let token: string;
  let t: TemplateView;
  beforeAll(async () => {
    token = (await svc.freshTenant('page')).token;
    t = await createTemplate(svc.base, token, sensor());
    await createDevices(svc.base, token, { id: 'f1', label: 'one', templates: [t.id] });
    await createDevices(svc.base, token, { id: 'f2', label: 'two', templates: [t.id] });
  });
  const TOO_LARGE = { message: 'page_size must be at most 1000', status: 400 };

  it('GET /device/template/{id}: 1001 is 400, 1000 is fine; checked before the template is', async () => {
    const over = await http<DeviceList>('GET', `${svc.base}/device/template/${t.id}?page_size=1001`, { token });
    expect(over.status).toBe(400);
    expect(over.body).toEqual(TOO_LARGE);
    expect((await http<DeviceList>('GET', `${svc.base}/device/template/999999?page_size=1001`, { token })).body).toEqual(TOO_LARGE);
    expect((await http<DeviceList>('GET', `${svc.base}/device/template/${t.id}?page_size=%201001%20`, { token })).body).toEqual(TOO_LARGE);
    const max = await http<DeviceList>('GET', `${svc.base}/device/template/${t.id}?page_size=1000`, { token });
    expect(max.status).toBe(200);
    expect(max.body.devices.map((d) => d.id)).toEqual(['f1', 'f2']);
    expect(max.body.pagination).toEqual({ page: 1, total: 1, has_next: false, next_page: null });
  });

  it('GET /internal/device: 1001 is 400, 1000 is fine, idsOnly does not read page_size', async () => {
    const over = await http<DeviceList>('GET', `${svc.internal}/internal/device?page_size=1001`, { token });
    expect(over.status).toBe(400);
    expect(over.body).toEqual(TOO_LARGE);
    const max = await http<DeviceList>('GET', `${svc.internal}/internal/device?page_size=1000`, { token });
    expect(max.status).toBe(200);
    expect(max.body.devices.map((d) => d.id)).toEqual(['f1', 'f2']);
    const ids = await http<DeviceList>('GET', `${svc.internal}/internal/device?idsOnly&page_size=1001`, { token });
    expect(ids.status).toBe(200);
    expect(ids.body).toEqual(['f1', 'f2']);
  });

  it.each<[string, string]>([
    ['page_size=x&page_num=0&attr=bad', 'page_size and page_num must be integers'],
    ['page_num=abc&page_size=1001', 'page_size and page_num must be integers'],
    ['page_num=0&page_size=0&attr=bad', 'Page numbers must be greater than 1'],
    ['page_num=0&page_size=1001', 'Page numbers must be greater than 1'],
    ['page_size=0&attr=bad', 'At least one entry per page is mandatory'],
    ['page_size=1001&attr=bad', 'page_size must be at most 1000'],
    [`page_size=1001&${Array.from({ length: 17 }, (_, i) => `attr=l${i}=v`).join('&')}`, 'page_size must be at most 1000'],
    ['attr=bad', 'attr filter "bad" must have the form <label>=<value>'],
  ])('GET /internal/device?%s: 400 %s', async (query, message) => {
    const res = await http<DeviceList>('GET', `${svc.internal}/internal/device?${query}`, { token });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message, status: 400 });
  });
});
