// The filters of GET /device (and GET /internal/device) at their edges: the label filter
// (case-sensitive, literal, prefix or suffix only) and attr=<label>=<value> (split at the first
// `=`, the device's own value wins). Each describe block works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceList, DeviceView, TemplateList, TemplateView } from '../helpers/api.js';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { deviceQueries } from './fixtures.js';

const svc = useService();
const { idsOf } = deviceQueries(svc);

describe('the label filter: case-sensitive, literal, prefix or suffix only', () => {
  let token: string;
  const all = ['b1', 'b2', 'c1', 'c2', 'c3', 'd1', 'd2', 'e1', 'e2'];
  beforeAll(async () => {
    token = (await svc.freshTenant('label')).token;
    const devices: Array<[string, string]> = [
      ['c1', 'Kitchen'],
      ['c2', 'kitchen'],
      ['c3', 'my kitchen'],
      ['d1', 'x%y'],
      ['d2', 'xzy'],
      ['e1', 'a_c'],
      ['e2', 'abc'],
      ['b1', 'p\\q'],
      ['b2', 'pzq'],
    ];
    for (const [id, label] of devices) await createDevices(svc.base, token, { id, label, templates: [] });
  });

  it.each<[string, string[]]>([
    ['Kitchen', ['c1']],
    ['kitchen', ['c2']], // 'my kitchen_0' neither starts nor ends with it
    ['KITCHEN', []],
    ['kitchen_0', ['c2', 'c3']], // prefix of one, suffix of the other; not 'Kitchen_0'
    ['Kitchen_0', ['c1']],
    ['itchen', []], // inside only
    ['itch', []],
    ['my%20kitchen', ['c3']],
    ['x%25y', ['d1']], // % is no wildcard: not 'xzy_0'
    ['x%25', ['d1']],
    ['%25y_0', ['d1']],
    ['%25', []],
    ['%25%25', []],
    ['a_c', ['e1']], // _ is no wildcard: not 'abc_0'
    ['_', []], // nothing starts or ends with '_'
    ['__', []],
    ['_0', all],
    ['p%5Cq', ['b1']], // a backslash is a character like any other
    ['%5Cq_0', ['b1']],
    ['%5C', []],
    ['', all],
  ])('label=%s', async (value, expected) => {
    expect(await idsOf(token, `label=${value}`)).toEqual(expected);
    const res = await http<DeviceList>('GET', `${svc.base}/device?label=${value}&page_size=1000`, { token });
    expect(res.body.devices.map((d) => d.id)).toEqual(expected);
    expect(res.body.pagination.total).toBe(expected.length ? 1 : 0);
  });

  it('GET /internal/device filters the same way', async () => {
    const ids = async (q: string) =>
      (await http<DeviceList>('GET', `${svc.internal}/internal/device?${q}`, { token })).body.devices.map((d) => d.id);
    expect(await ids('label=x%25')).toEqual(['d1']);
    expect(await ids('label=a_c')).toEqual(['e1']);
    expect(await ids('label=_')).toEqual([]);
    expect(await ids('label=KITCHEN')).toEqual([]);
    expect(await ids('label=kitchen_0')).toEqual(['c2', 'c3']);
  });
});

describe('attr=<label>=<value>: split at the first `=`, the device override wins', () => {
  let token: string;
  let t: TemplateView;
  beforeAll(async () => {
    token = (await svc.freshTenant('attr')).token;
    t = await createTemplate(svc.base, token, {
      label: 'Conf',
      attrs: [
        { label: 'conf', type: 'static', value_type: 'string', static_value: 'a=b' },
        { label: 'mode', type: 'static', value_type: 'string', static_value: 'm' },
      ],
    });
    await createDevices(svc.base, token, { id: 'a1', label: 'tpl', templates: [t.id] });
    await createDevices(svc.base, token, { id: 'a2', label: 'xyz', templates: [t.id], attrs: [{ label: 'conf', static_value: 'x=y=z' }] });
    await createDevices(svc.base, token, { id: 'a3', label: 'a', templates: [t.id], attrs: [{ label: 'conf', static_value: 'a' }] });
    await createDevices(svc.base, token, { id: 'a4', label: 'eq', templates: [t.id], attrs: [{ label: 'conf', static_value: '=' }] });
  });

  it.each<[string, string[]]>([
    ['attr=conf=a=b', ['a1']], // the template's value; the devices with an override do not have it
    ['attr=conf%3Da%3Db', ['a1']],
    ['attr=conf=x=y=z', ['a2']],
    ['attr=conf=a', ['a3']],
    ['attr=conf==', ['a4']],
    ['attr=conf=x', []],
    ['attr=conf=b', []],
    ['attr=conf=a=b&attr=mode=m', ['a1']],
    ['attr=conf=x=y=z&attr=mode=m', ['a2']],
    ['attr=conf=x=y=z&attr=mode=x=y=z', []],
  ])('%s', async (query, expected) => {
    expect(await idsOf(token, query)).toEqual(expected);
    const res = await http<DeviceList>('GET', `${svc.base}/device?${query}`, { token });
    expect(res.status).toBe(200);
    expect(res.body.devices.map((d) => d.id)).toEqual(expected);
  });

  it('the override shows in the device view the filter matched', async () => {
    const res = await http<DeviceList>('GET', `${svc.base}/device?attr=conf=x=y=z`, { token });
    expect(res.body.devices[0]!.attrs[String(t.id)]![0]).toMatchObject({
      label: 'conf',
      static_value: 'x=y=z',
      is_static_overridden: true,
    });
  });

  it('GET /internal/device splits and uses overrides the same way', async () => {
    const ids = async (q: string) =>
      (await http<DeviceList>('GET', `${svc.internal}/internal/device?${q}`, { token })).body.devices.map((d) => d.id);
    expect(await ids('attr=conf=a=b')).toEqual(['a1']);
    expect(await ids('attr=conf=x=y=z')).toEqual(['a2']);
    expect(await ids('attr=conf==')).toEqual(['a4']);
  });

  it('templates are filtered by their own value, device overrides do not count', async () => {
    const tpl = async (q: string) =>
      (await http<TemplateList>('GET', `${svc.base}/template?${q}`, { token })).body.templates.map((x) => x.id);
    expect(await tpl('attr=conf=a=b')).toEqual([t.id]);
    expect(await tpl('attr=conf=x=y=z')).toEqual([]);
  });

  it('an override set by PUT /device is matched at once; the template value no longer is', async () => {
    expect(await idsOf(token, 'attr=conf=x=y=z')).toEqual(['a2']); // the list is cached now
    const res = await http('PUT', `${svc.base}/device/a1`, {
      token,
      body: { label: 'tpl_0', templates: [t.id], attrs: [{ label: 'conf', static_value: 'x=y=z' }] },
    });
    expect(res.status, res.text).toBe(200);
    expect(await idsOf(token, 'attr=conf=x=y=z')).toEqual(['a1', 'a2']);
    expect(await idsOf(token, 'attr=conf=a=b')).toEqual([]);
  });
});

describe('attr=<label>=<value> on a psk attribute: a device shows no value for it, so none matches', () => {
  // A psk attribute's value in a device is its key, never shown by a public view. A template
  // value or an override left from before the attribute became psk matched the filter although
  // no view showed it (found by an audit).
  let token: string;
  beforeAll(async () => {
    token = (await svc.freshTenant('pskfilter')).token;
  });

  it('an override kept when the attribute became psk, and a psk template value, match nothing', async () => {
    const t = await createTemplate(svc.base, token, {
      label: 'conv',
      attrs: [{ label: 'cv', type: 'static', value_type: 'string', static_value: 'T' }],
    });
    await createDevices(svc.base, token, { id: 'c1', label: 'conv', templates: [t.id], attrs: [{ label: 'cv', static_value: 'OVR' }] });
    await createDevices(svc.base, token, { id: 'c2', label: 'conv', templates: [t.id] });
    expect(await idsOf(token, 'attr=cv=OVR')).toEqual(['c1']);
    const res = await http('PUT', `${svc.base}/template/${t.id}`, {
      token,
      body: { label: 'conv', attrs: [{ label: 'cv', type: 'static', value_type: 'psk', static_value: 'T' }] },
    });
    expect(res.status, res.text).toBe(200);
    const view = await http<DeviceView>('GET', `${svc.base}/device/c1`, { token });
    expect(view.body.attrs[String(t.id)]![0]).not.toHaveProperty('static_value');
    for (const q of ['attr=cv=OVR', 'attr=cv=T']) {
      expect(await idsOf(token, q)).toEqual([]);
      const page = await http<DeviceList>('GET', `${svc.base}/device?${q}`, { token });
      expect([page.status, page.body.devices.map((d) => d.id), page.body.pagination.total]).toEqual([200, [], 0]);
    }
    // The template itself still shows and matches its own value.
    expect((await http<TemplateList>('GET', `${svc.base}/template?attr=cv=T`, { token })).body.templates.map((x) => x.id)).toEqual([t.id]);
  });
});
