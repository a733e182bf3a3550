// The two plans of attr= filters on devices (walk the devices; collect a set) give the same
// answers; the service picks one by the count, so both are checked here directly.
import { beforeAll, describe, expect, it } from 'vitest';
import { type AttrPlan, listDevices } from '../../src/registry/devices/repo.js';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { locator, thermometer } from './fixtures.js';

const svc = useService();

beforeAll(async () => {
  const token = svc.token;
  const thermo = await createTemplate(svc.base, token, thermometer);
  const loc = await createTemplate(svc.base, token, locator);
  const twin = await createTemplate(svc.base, token, {
    label: 'twin',
    attrs: [{ label: 'vendor', type: 'static', value_type: 'string', static_value: 'initech' }],
  });
  await createDevices(svc.base, token, { id: 'd1', label: 'a', templates: [thermo.id, loc.id] });
  await createDevices(svc.base, token, {
    id: 'd2',
    label: 'b',
    templates: [loc.id],
    attrs: [{ label: 'vendor', static_value: 'initech' }],
  });
  await createDevices(svc.base, token, { id: 'd3', label: 'c', templates: [twin.id] });
  await createDevices(svc.base, token, { id: 'd4', label: 'd', templates: [twin.id], attrs: [{ label: 'vendor', static_value: 'acme' }] });
  await createDevices(svc.base, token, {
    id: 'd5',
    label: 'e',
    templates: [thermo.id],
    attrs: [{ label: 'serial', static_value: 'SN-5' }],
  });
  await createDevices(svc.base, token, { id: 'd6', label: 'f', templates: [] });
  // A psk attribute: its template value, and an override kept from before it became psk, match nothing.
  const keyed = await createTemplate(svc.base, token, {
    label: 'keyed',
    attrs: [{ label: 'pin', type: 'static', value_type: 'string', static_value: 'P0' }],
  });
  await createDevices(svc.base, token, { id: 'd7', label: 'g', templates: [keyed.id], attrs: [{ label: 'pin', static_value: 'P7' }] });
  await createDevices(svc.base, token, { id: 'd8', label: 'h', templates: [keyed.id] });
  const put = await http('PUT', `${svc.base}/template/${keyed.id}`, {
    token,
    body: { label: 'keyed', attrs: [{ label: 'pin', type: 'static', value_type: 'psk', static_value: 'P0' }] },
  });
  expect(put.status, put.text).toBe(200);
});

const ids = async (plan: AttrPlan, attrs: Array<{ label: string; value: string }>, label?: string) =>
  (
    await listDevices(
      svc.service.pool,
      'admin',
      { filters: { label, attrs, attrTypes: [], sortByLabel: false } },
      { num: 1, size: 100, offset: 0 },
      plan,
    )
  ).map((d) => d.id);

describe('attr= filter plans', () => {
  const cases: Array<[string, Array<{ label: string; value: string }>, string | undefined, string[]]> = [
    ['template value, not overridden', [{ label: 'vendor', value: 'acme' }], undefined, ['d1', 'd4']],
    ['override value and template value', [{ label: 'vendor', value: 'initech' }], undefined, ['d2', 'd3']],
    ['a unique override', [{ label: 'serial', value: 'SN-5' }], undefined, ['d5']],
    ['an overridden template value no longer matches', [{ label: 'serial', value: 'undefined' }], undefined, ['d1']],
    [
      'two filters',
      [
        { label: 'vendor', value: 'acme' },
        { label: 'serial', value: 'undefined' },
      ],
      undefined,
      ['d1'],
    ],
    ['with a label filter', [{ label: 'vendor', value: 'initech' }], 'c', ['d3']],
    ['nothing', [{ label: 'vendor', value: 'nobody' }], undefined, []],
    ['a psk attribute: its template value', [{ label: 'pin', value: 'P0' }], undefined, []],
    ['a psk attribute: an override from before it became psk', [{ label: 'pin', value: 'P7' }], undefined, []],
  ];
  it.each(cases)('%s', async (_name, attrs, label, expected) => {
    expect(await ids('walk', attrs, label)).toEqual(expected);
    expect(await ids('set', attrs, label)).toEqual(expected);
  });
});
