// GET /device (and GET /internal/device) order: by id, or by label with sortBy=label (byte
// order, ties by id), the same across pages. Works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList } from '../helpers/api.js';
import { createDevices } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { deviceQueries } from './fixtures.js';

const svc = useService();
const { idsOf } = deviceQueries(svc);

describe('GET /device order', () => {
  let token: string;
  // Created in this order, so creation order, id order and label order all differ.
  const made: Array<[string, string]> = [
    ['e5', 'same'],
    ['b2', 'Zed'],
    ['a1', 'same'],
    ['d4', 'alpha'],
    ['c3', 'same'],
    ['0f', 'beta'],
  ];
  const byId = ['0f', 'a1', 'b2', 'c3', 'd4', 'e5'];
  // byte order ('Z' < 'a'), equal labels (`same_0`) by id
  const byLabel = ['b2', 'd4', '0f', 'a1', 'c3', 'e5'];
  beforeAll(async () => {
    token = (await svc.freshTenant('sort')).token;
    for (const [id, label] of made) await createDevices(svc.base, token, { id, label, templates: [] });
  });

  const page = async (query: string) => {
    const res = await http<DeviceList>('GET', `${svc.base}/device?${query}`, { token });
    expect(res.status, res.text).toBe(200);
    return res.body.devices.map((d) => d.id);
  };

  it.each([
    '',
    'sortBy=id',
    'sortBy=LABEL',
    'sortBy=Label',
    'sortBy=',
    'sortBy',
    'sortBy=label%20',
    'sortBy=created',
    'sortBy=-label',
    'sortBy=label,id',
  ])('%s: by id ascending', async (query) => {
    expect(await page(query)).toEqual(byId);
    expect(await idsOf(token, query)).toEqual(byId);
  });

  it('sortBy=label: label ascending, ties by id', async () => {
    expect(await page('sortBy=label')).toEqual(byLabel);
    expect(await idsOf(token, 'sortBy=label')).toEqual(byLabel);
    const labels = (await http<DeviceList>('GET', `${svc.base}/device?sortBy=label`, { token })).body.devices.map((d) => d.label);
    expect(labels).toEqual(['Zed_0', 'alpha_0', 'beta_0', 'same_0', 'same_0', 'same_0']);
  });

  it('the order holds across pages, ties split between pages included', async () => {
    expect(await page('sortBy=label&page_size=4&page_num=1')).toEqual(byLabel.slice(0, 4));
    expect(await page('sortBy=label&page_size=4&page_num=2')).toEqual(byLabel.slice(4));
    expect(await page('sortBy=label&page_size=2&page_num=3')).toEqual(['c3', 'e5']);
    expect(await page('sortBy=LABEL&page_size=2&page_num=2')).toEqual(['b2', 'c3']);
    expect(await page('sortBy=label&label=same')).toEqual(['a1', 'c3', 'e5']);
  });

  it('GET /internal/device orders the same way', async () => {
    const ids = async (q: string) =>
      (await http<DeviceList>('GET', `${svc.internal}/internal/device?${q}`, { token })).body.devices.map((d) => d.id);
    expect(await ids('sortBy=label')).toEqual(byLabel);
    expect(await ids('sortBy=id')).toEqual(byId);
    expect(await ids('sortBy=LABEL')).toEqual(byId);
  });
});
