import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList, OverrideBody, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { type ApiResponse, http, useService } from '../helpers/service.js';
import { locator, thermometer } from './fixtures.js';

const svc = useService();
let thermo: TemplateView;
let loc: TemplateView;
const ids: Record<string, string> = {};

beforeAll(async () => {
  thermo = await createTemplate(svc.base, svc.token, thermometer);
  loc = await createTemplate(svc.base, svc.token, locator);
  // Client-chosen ids in ascending order, so that id order is creation order.
  const make = async (id: string, label: string, templates: number[], attrs?: OverrideBody[]) => {
    await createDevices(svc.base, svc.token, { id, label, templates, attrs });
    ids[`${label}_0`] = id;
  };
  await make('a1', 'kitchen', [thermo.id]);
  await make('a2', 'Attic', [loc.id], [{ label: 'vendor', static_value: 'initech' }]);
  await make('a3', 'garage', [thermo.id, loc.id]);
  await make('a4', 'big%kitchen', [loc.id]);
  await make('a5', 'bare', []);
});

const list = (query = '') => http<DeviceList>('GET', `${svc.base}/device${query}`, { token: svc.token });
const labels = (res: ApiResponse<DeviceList>) => res.body.devices.map((d) => d.label);

describe('GET /device', () => {
  it('default: by id, {devices, pagination}, each device as GET /device/{id} shows it', async () => {
    const res = await list();
    expect(res.status).toBe(200);
    expect(labels(res)).toEqual(['kitchen_0', 'Attic_0', 'garage_0', 'big%kitchen_0', 'bare_0']);
    expect(res.body.pagination).toEqual({ page: 1, total: 1, has_next: false, next_page: null });
    expect(res.body.devices[2]).toEqual(await getDevice(svc.base, svc.token, 'a3'));
  });

  it('sortBy=label: byte order, ties by id', async () => {
    expect(labels(await list('?sortBy=label'))).toEqual(['Attic_0', 'bare_0', 'big%kitchen_0', 'garage_0', 'kitchen_0']);
  });

  it('pagination: total pages, past the end, and the error order', async () => {
    expect((await list('?page_size=2&page_num=2')).body.pagination).toEqual({ page: 2, total: 3, has_next: true, next_page: 3 });
    expect(labels(await list('?page_size=2&page_num=3'))).toEqual(['bare_0']);
    expect((await list('?page_size=2&page_num=7')).body).toEqual({
      devices: [],
      pagination: { page: 7, total: 3, has_next: false, next_page: null },
    });
    expect((await list('?page_size=x&page_num=0')).body).toEqual({ message: 'page_size and page_num must be integers', status: 400 });
    expect((await list('?page_num=0&page_size=0')).body).toEqual({ message: 'Page numbers must be greater than 1', status: 400 });
    expect((await list('?page_size=0')).body).toEqual({ message: 'At least one entry per page is mandatory', status: 400 });
    expect((await list('?page_size=5000')).body).toEqual({ message: 'page_size must be at most 1000', status: 400 });
  });

  it('label: prefix or suffix, literal', async () => {
    expect(labels(await list('?label=kitchen'))).toEqual(['kitchen_0']);
    expect(labels(await list('?label=_0'))).toHaveLength(5);
    expect(labels(await list('?label=big%25'))).toEqual(['big%kitchen_0']);
    expect(labels(await list('?label=%25'))).toEqual([]);
    expect(labels(await list('?label=itchen'))).toEqual([]);
  });

  it('attr=<label>=<value>: the override wins over the template value', async () => {
    expect(labels(await list('?attr=vendor=acme'))).toEqual(['garage_0', 'big%kitchen_0']);
    expect(labels(await list('?attr=vendor=initech'))).toEqual(['Attic_0']);
    expect(labels(await list('?attr=vendor=acme&attr=serial=undefined'))).toEqual(['garage_0']);
    expect((await list('?attr=vendor')).status).toBe(400);
  });

  it('attr_type: type or value_type; several must all hold; combined with the other filters', async () => {
    expect(labels(await list('?attr_type=actuator'))).toEqual(['kitchen_0', 'garage_0']);
    expect(labels(await list('?attr_type=geopoint'))).toEqual(['Attic_0', 'garage_0', 'big%kitchen_0']);
    expect(labels(await list('?attr_type=geopoint&attr_type=bool'))).toEqual(['garage_0']);
    expect(labels(await list('?attr_type=geopoint&label=big&sortBy=label'))).toEqual(['big%kitchen_0']);
    expect(labels(await list('?attr_type=geopoint&attr=vendor=acme&page_size=1&page_num=2'))).toEqual(['big%kitchen_0']);
    expect((await list('?attr_type=string&page_size=1')).body.pagination.total).toBe(4);
    // an empty value asks for a type equal to "", which no attribute has
    expect(labels(await list('?attr_type='))).toEqual([]);
  });

  it('idsOnly (true, 1 or bare): every matching id, pagination ignored', async () => {
    expect((await list('?idsOnly=true')).body).toEqual(['a1', 'a2', 'a3', 'a4', 'a5']);
    expect((await list('?idsOnly=1&page_size=1&page_num=9')).body).toEqual(['a1', 'a2', 'a3', 'a4', 'a5']);
    expect((await list('?idsOnly&attr_type=geopoint&sortBy=label')).body).toEqual(['a2', 'a4', 'a3']);
    expect(labels(await list('?idsOnly=false&page_size=1'))).toEqual(['kitchen_0']);
  });
});

describe('GET /device/template/{template_id}', () => {
  it('the devices built from the template, paginated', async () => {
    const res = await http<DeviceList>('GET', `${svc.base}/device/template/${loc.id}?page_size=2`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(labels(res)).toEqual(['Attic_0', 'garage_0']);
    expect(res.body.pagination).toEqual({ page: 1, total: 2, has_next: true, next_page: 2 });
    expect(res.body.devices[1]).toEqual(await getDevice(svc.base, svc.token, 'a3'));
  });

  it.each(['999999', 'abc'])('unknown template %s: 200 with an empty page', async (id) => {
    const res = await http('GET', `${svc.base}/device/template/${id}`, { token: svc.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ devices: [], pagination: { page: 1, total: 0, has_next: false, next_page: null } });
  });

  it('pagination errors apply', async () => {
    const res = await http('GET', `${svc.base}/device/template/${loc.id}?page_num=0`, { token: svc.token });
    expect(res.body).toEqual({ message: 'Page numbers must be greater than 1', status: 400 });
  });
});

describe('odd input is never a 500', () => {
  it('repeated filters: the same one twice counts once; the 16 allowed of each answer at once; a 17th is 400', async () => {
    expect(labels(await list('?attr_type=geopoint&attr_type=geopoint&attr=vendor=acme&attr=vendor=acme'))).toEqual(
      labels(await list('?attr_type=geopoint&attr=vendor=acme')),
    );
    const types = Array.from({ length: 16 }, (_, i) => `attr_type=t${i}`).join('&');
    const attrs = Array.from({ length: 16 }, (_, i) => `attr=l${i}=v`).join('&');
    const all = await list(`?${types}&${attrs}`);
    expect(all.status).toBe(200);
    expect(all.body.devices).toEqual([]);
    const over = await list(`?${types}&attr_type=t16`);
    expect(over.body).toEqual({ message: 'At most 16 attr_type filters are allowed in one request', status: 400 });
    expect((await http('GET', `${svc.base}/template?${attrs}&attr=l16=v`, { token: svc.token })).body).toEqual({
      message: 'At most 16 attr filters are allowed in one request',
      status: 400,
    });
  });

  it.each(['?label=%00', '?attr=a%00=b', '?attr_type=%00', '?idsOnly&label=%00'])('%s: nothing matches', async (query) => {
    const res = await list(query);
    expect(res.status).toBe(200);
    expect(Array.isArray(res.body) ? res.body : res.body.devices).toEqual([]);
  });

  it('NUL in a body: 400 in the validation body', async () => {
    const res = await http('POST', `${svc.base}/device`, { token: svc.token, body: { label: 'a\u0000b', templates: [] } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'failed to parse input', errors: { label: ['Must not contain the NUL character.'] } });
    const t = await http('POST', `${svc.base}/template`, {
      token: svc.token,
      body: { label: 'x', attrs: [{ label: 'a', type: 'dyn\u0000', value_type: 'float' }] },
    });
    expect(t.body).toEqual({ message: 'failed to parse attr', errors: { type: ['Must not contain the NUL character.'] } });
  });
});
