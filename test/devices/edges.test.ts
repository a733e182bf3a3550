// Edge cases of the device routes that the other device tests leave out: `updated` and template
// updates, list order and filters at their edges, the count and page-size maxima, Content-Type
// parameters, odd ids, the flag and integer spellings of the query, extra body keys, and tenant
// isolation of PUT and DELETE. Each describe block works in a tenant of its own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, tenantToken, type TestService } from '../helpers/service.js';
import { createDevices, createTemplate, getDevice, TS } from './fixtures.js';

let svc: TestService;
let admin: string;

beforeAll(async () => {
  svc = await startTestService();
  admin = await login(svc.base);
});
afterAll(() => svc?.stop());

/** A token for a user of a tenant no other block uses. */
const freshTenant = (name: string) => tenantToken(svc.base, admin, `edges-${name}`);

/** Every id of the caller's tenant that a GET /device query selects, in the order it answers. */
async function idsOf(token: string, query = ''): Promise<string[]> {
  const res = await http('GET', `${svc.base}/device?idsOnly${query ? `&${query}` : ''}`, { token });
  expect(res.status, res.text).toBe(200);
  return res.body;
}
const deviceCount = async (token: string) => (await idsOf(token)).length;

const NOT_JSON = { message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 };
const VIEW_KEYS = ['id', 'label', 'created', 'templates', 'attrs'];

const sensor = () => ({
  label: 'Sensor',
  attrs: [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'serial', type: 'static', value_type: 'string', static_value: 'SN-0' },
    { label: 'led', type: 'actuator', value_type: 'bool' },
  ],
});

// 1 ------------------------------------------------------------------------------------------
describe('a template update changes the devices built from it, but not their `updated`', () => {
  let token: string;
  let t: any;
  beforeAll(async () => {
    token = await freshTenant('tplupd');
    t = await createTemplate(svc.base, token, sensor());
    await createDevices(svc.base, token, { id: 'a1', label: 'plain', templates: [t.id] });
    await createDevices(svc.base, token, { id: 'a2', label: 'own', templates: [t.id], attrs: [{ label: 'serial', static_value: 'mine' }] });
  });

  it('every view shows the new attributes at once, and none shows `updated`', async () => {
    const before1 = await getDevice(svc.base, token, 'a1'); // cached now
    const before2 = await getDevice(svc.base, token, 'a2');
    expect(Object.keys(before1)).toEqual(VIEW_KEYS);

    const body = sensor();
    body.attrs[1]!.static_value = 'SN-1';
    body.attrs.splice(2, 1); // led removed
    body.attrs.push({ label: 'humidity', type: 'dynamic', value_type: 'float' });
    const res = await http('PUT', `${svc.base}/template/${t.id}`, { token, body });
    expect(res.status, res.text).toBe(200);

    const d1 = await getDevice(svc.base, token, 'a1');
    const d2 = await getDevice(svc.base, token, 'a2');
    for (const [d, before] of [[d1, before1], [d2, before2]]) {
      expect(Object.keys(d)).toEqual(VIEW_KEYS); // no `updated`
      expect(d.created).toBe(before.created);
      expect(d.label).toBe(before.label);
      expect(d.attrs[String(t.id)].map((a: any) => a.label)).toEqual(['temperature', 'serial', 'humidity']);
    }
    expect(d1.attrs[String(t.id)][1]).toMatchObject({ static_value: 'SN-1', is_static_overridden: false });
    expect(d2.attrs[String(t.id)][1]).toMatchObject({ static_value: 'mine', is_static_overridden: true });

    // the list pages, the per-template list and the internal views say the same
    const listed = await http('GET', `${svc.base}/device`, { token });
    expect(listed.body.devices).toEqual([d1, d2]);
    expect((await http('GET', `${svc.base}/device/template/${t.id}`, { token })).body.devices).toEqual([d1, d2]);
    const internal = await http('GET', `${svc.internal}/internal/device/a1`, { token });
    expect(internal.body).toEqual(d1);
    expect((await http('GET', `${svc.internal}/internal/device`, { token })).body.devices).toEqual([d1, d2]);
    // and the filters see the new value
    expect(await idsOf(token, 'attr=serial=SN-1')).toEqual(['a1']);
    expect(await idsOf(token, 'attr=serial=SN-0')).toEqual([]);
  });

  it('after a PUT /device the device has `updated`; a later template update does not move it', async () => {
    const put = await http('PUT', `${svc.base}/device/a1`, { token, body: { label: 'plain_0', templates: [t.id] } });
    expect(put.status, put.text).toBe(200);
    const updated = put.body.device.updated;
    expect(updated).toMatch(TS);
    const body = sensor();
    body.attrs[1]!.static_value = 'SN-2';
    expect((await http('PUT', `${svc.base}/template/${t.id}`, { token, body })).status).toBe(200);
    const d = await getDevice(svc.base, token, 'a1');
    expect(d.attrs[String(t.id)][1].static_value).toBe('SN-2');
    expect(d.updated).toBe(updated);
    expect(Object.keys(await getDevice(svc.base, token, 'a2'))).toEqual(VIEW_KEYS);
  });
});

// 2 ------------------------------------------------------------------------------------------
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
    token = await freshTenant('sort');
    for (const [id, label] of made) await createDevices(svc.base, token, { id, label, templates: [] });
  });

  const page = async (query: string) => {
    const res = await http('GET', `${svc.base}/device?${query}`, { token });
    expect(res.status, res.text).toBe(200);
    return res.body.devices.map((d: any) => d.id);
  };

  it.each(['', 'sortBy=id', 'sortBy=LABEL', 'sortBy=Label', 'sortBy=', 'sortBy', 'sortBy=label%20', 'sortBy=created', 'sortBy=-label', 'sortBy=label,id'])(
    '%s: by id ascending',
    async (query) => {
      expect(await page(query)).toEqual(byId);
      expect(await idsOf(token, query)).toEqual(byId);
    },
  );

  it('sortBy=label: label ascending, ties by id', async () => {
    expect(await page('sortBy=label')).toEqual(byLabel);
    expect(await idsOf(token, 'sortBy=label')).toEqual(byLabel);
    const labels = (await http('GET', `${svc.base}/device?sortBy=label`, { token })).body.devices.map((d: any) => d.label);
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
    const ids = async (q: string) => (await http('GET', `${svc.internal}/internal/device?${q}`, { token })).body.devices.map((d: any) => d.id);
    expect(await ids('sortBy=label')).toEqual(byLabel);
    expect(await ids('sortBy=id')).toEqual(byId);
    expect(await ids('sortBy=LABEL')).toEqual(byId);
  });
});

// 3 ------------------------------------------------------------------------------------------
describe('the label filter: case-sensitive, literal, prefix or suffix only', () => {
  let token: string;
  const all = ['b1', 'b2', 'c1', 'c2', 'c3', 'd1', 'd2', 'e1', 'e2'];
  beforeAll(async () => {
    token = await freshTenant('label');
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
    const res = await http('GET', `${svc.base}/device?label=${value}&page_size=1000`, { token });
    expect(res.body.devices.map((d: any) => d.id)).toEqual(expected);
    expect(res.body.pagination.total).toBe(expected.length ? 1 : 0);
  });

  it('GET /internal/device filters the same way', async () => {
    const ids = async (q: string) => (await http('GET', `${svc.internal}/internal/device?${q}`, { token })).body.devices.map((d: any) => d.id);
    expect(await ids('label=x%25')).toEqual(['d1']);
    expect(await ids('label=a_c')).toEqual(['e1']);
    expect(await ids('label=_')).toEqual([]);
    expect(await ids('label=KITCHEN')).toEqual([]);
    expect(await ids('label=kitchen_0')).toEqual(['c2', 'c3']);
  });
});

// 4 ------------------------------------------------------------------------------------------
describe('attr=<label>=<value>: split at the first `=`, the device override wins', () => {
  let token: string;
  let t: any;
  beforeAll(async () => {
    token = await freshTenant('attr');
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
    const res = await http('GET', `${svc.base}/device?${query}`, { token });
    expect(res.status).toBe(200);
    expect(res.body.devices.map((d: any) => d.id)).toEqual(expected);
  });

  it('the override shows in the device view the filter matched', async () => {
    const res = await http('GET', `${svc.base}/device?attr=conf=x=y=z`, { token });
    expect(res.body.devices[0].attrs[String(t.id)][0]).toMatchObject({ label: 'conf', static_value: 'x=y=z', is_static_overridden: true });
  });

  it('GET /internal/device splits and uses overrides the same way', async () => {
    const ids = async (q: string) => (await http('GET', `${svc.internal}/internal/device?${q}`, { token })).body.devices.map((d: any) => d.id);
    expect(await ids('attr=conf=a=b')).toEqual(['a1']);
    expect(await ids('attr=conf=x=y=z')).toEqual(['a2']);
    expect(await ids('attr=conf==')).toEqual(['a4']);
  });

  it('templates are filtered by their own value, device overrides do not count', async () => {
    const tpl = async (q: string) => (await http('GET', `${svc.base}/template?${q}`, { token })).body.templates.map((x: any) => x.id);
    expect(await tpl('attr=conf=a=b')).toEqual([t.id]);
    expect(await tpl('attr=conf=x=y=z')).toEqual([]);
  });

  it('an override set by PUT /device is matched at once; the template value no longer is', async () => {
    expect(await idsOf(token, 'attr=conf=x=y=z')).toEqual(['a2']); // the list is cached now
    const res = await http('PUT', `${svc.base}/device/a1`, { token, body: { label: 'tpl_0', templates: [t.id], attrs: [{ label: 'conf', static_value: 'x=y=z' }] } });
    expect(res.status, res.text).toBe(200);
    expect(await idsOf(token, 'attr=conf=x=y=z')).toEqual(['a1', 'a2']);
    expect(await idsOf(token, 'attr=conf=a=b')).toEqual([]);
  });
});

// 5 ------------------------------------------------------------------------------------------
describe('POST /device?count at the maximum (10000)', () => {
  let token: string;
  let t: any;
  beforeAll(async () => {
    token = await freshTenant('bulk');
    t = await createTemplate(svc.base, token, sensor());
  });

  it('count=10001 before anything exists: 400, nothing created', async () => {
    const res = await http('POST', `${svc.base}/device?count=10001`, { token, body: { label: 'x', templates: [t.id] } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'count must be at most 10000', status: 400 });
    expect(await deviceCount(token)).toBe(0);
  });

  it('count=10000: 200, 10000 devices labelled x_0 .. x_9999', { timeout: 120_000 }, async () => {
    const res = await http('POST', `${svc.base}/device?count=10000`, { token, body: { label: 'x', templates: [t.id] } });
    expect(res.status, res.text.slice(0, 200)).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['devices', 'message']);
    expect(res.body.message).toBe('devices created');
    const devices: Array<{ id: string; label: string }> = res.body.devices;
    expect(devices).toHaveLength(10000);
    expect(devices.map((d) => d.label)).toEqual(Array.from({ length: 10000 }, (_, i) => `x_${i}`));
    expect(devices.every((d) => /^[0-9a-f]{6}$/.test(d.id) && Object.keys(d).length === 2)).toBe(true);
    expect(new Set(devices.map((d) => d.id)).size).toBe(10000);
    for (const i of [0, 1, 4999, 9998, 9999]) {
      const view = await getDevice(svc.base, token, devices[i]!.id);
      expect(view.label).toBe(`x_${i}`);
      expect(view.templates).toEqual([String(t.id)]);
      expect(view.attrs[String(t.id)].map((a: any) => a.label)).toEqual(['temperature', 'serial', 'led']);
    }
    const ids = await idsOf(token);
    expect(ids).toHaveLength(10000);
    expect([...ids].sort()).toEqual(devices.map((d) => d.id).sort());
    expect((await http('GET', `${svc.base}/device?page_size=1000`, { token })).body.pagination).toEqual({ page: 1, total: 10, has_next: true, next_page: 2 });
    expect((await http('GET', `${svc.base}/device?label=x_9999`, { token })).body.devices.map((d: any) => d.id)).toEqual([devices[9999]!.id]);
  });

  it('count=10001 afterwards: 400, still 10000 devices', async () => {
    const res = await http('POST', `${svc.base}/device?count=10001`, { token, body: { label: 'y', templates: [t.id] } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'count must be at most 10000', status: 400 });
    expect(await deviceCount(token)).toBe(10000);
    expect(await idsOf(token, 'label=y_')).toEqual([]);
  });
});

// 6 ------------------------------------------------------------------------------------------
describe('Content-Type on POST and PUT /device', () => {
  let token: string;
  let t: any;
  beforeAll(async () => {
    token = await freshTenant('ctype');
    t = await createTemplate(svc.base, token, sensor());
    await createDevices(svc.base, token, { id: 'c2', label: 'keep', templates: [t.id] });
  });

  it.each(['application/json; charset=utf-8', 'application/json;charset=UTF-8'])('POST with %s: created', async (type) => {
    const before = await deviceCount(token);
    const res = await http('POST', `${svc.base}/device`, { token, rawBody: JSON.stringify({ label: 'ct', templates: [t.id] }), headers: { 'content-type': type } });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ message: 'devices created', devices: [{ id: expect.stringMatching(/^[0-9a-f]{6}$/), label: 'ct_0' }] });
    expect(await deviceCount(token)).toBe(before + 1);
    expect((await getDevice(svc.base, token, res.body.devices[0].id)).templates).toEqual([String(t.id)]);
  });

  it('PUT with application/json; charset=utf-8: updated', async () => {
    await createDevices(svc.base, token, { id: 'c1', label: 'put', templates: [] });
    const res = await http('PUT', `${svc.base}/device/c1`, {
      token,
      rawBody: JSON.stringify({ label: 'renamed', templates: [t.id] }),
      headers: { 'content-type': 'application/json; charset=utf-8' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.message).toBe('device updated');
    expect(res.body.device).toMatchObject({ id: 'c1', label: 'renamed', templates: [String(t.id)], updated: expect.stringMatching(TS) });
    expect(await getDevice(svc.base, token, 'c1')).toEqual(res.body.device);
  });

  it.each<[string, Record<string, string>, string | Buffer]>([
    ['text/plain', { 'content-type': 'text/plain' }, JSON.stringify({ label: 'changed', templates: [] })],
    ['no Content-Type', {}, Buffer.from(JSON.stringify({ label: 'changed', templates: [] }))],
  ])('PUT with %s: 400, the device unchanged', async (_name, headers, rawBody) => {
    const before = await getDevice(svc.base, token, 'c2');
    const count = await deviceCount(token);
    const res = await http('PUT', `${svc.base}/device/c2`, { token, rawBody, headers });
    expect(res.status).toBe(400);
    expect(res.body).toEqual(NOT_JSON);
    expect(await getDevice(svc.base, token, 'c2')).toEqual(before);
    expect(await deviceCount(token)).toBe(count);
  });
});

// 7 ------------------------------------------------------------------------------------------
describe('page_size above the maximum (1000), and the pagination error order', () => {
  let token: string;
  let t: any;
  beforeAll(async () => {
    token = await freshTenant('page');
    t = await createTemplate(svc.base, token, sensor());
    await createDevices(svc.base, token, { id: 'f1', label: 'one', templates: [t.id] });
    await createDevices(svc.base, token, { id: 'f2', label: 'two', templates: [t.id] });
  });
  const TOO_LARGE = { message: 'page_size must be at most 1000', status: 400 };

  it('GET /device/template/{id}: 1001 is 400, 1000 is fine; checked before the template is', async () => {
    const over = await http('GET', `${svc.base}/device/template/${t.id}?page_size=1001`, { token });
    expect(over.status).toBe(400);
    expect(over.body).toEqual(TOO_LARGE);
    expect((await http('GET', `${svc.base}/device/template/999999?page_size=1001`, { token })).body).toEqual(TOO_LARGE);
    expect((await http('GET', `${svc.base}/device/template/${t.id}?page_size=%201001%20`, { token })).body).toEqual(TOO_LARGE);
    const max = await http('GET', `${svc.base}/device/template/${t.id}?page_size=1000`, { token });
    expect(max.status).toBe(200);
    expect(max.body.devices.map((d: any) => d.id)).toEqual(['f1', 'f2']);
    expect(max.body.pagination).toEqual({ page: 1, total: 1, has_next: false, next_page: null });
  });

  it('GET /internal/device: 1001 is 400, 1000 is fine, idsOnly does not read page_size', async () => {
    const over = await http('GET', `${svc.internal}/internal/device?page_size=1001`, { token });
    expect(over.status).toBe(400);
    expect(over.body).toEqual(TOO_LARGE);
    const max = await http('GET', `${svc.internal}/internal/device?page_size=1000`, { token });
    expect(max.status).toBe(200);
    expect(max.body.devices.map((d: any) => d.id)).toEqual(['f1', 'f2']);
    const ids = await http('GET', `${svc.internal}/internal/device?idsOnly&page_size=1001`, { token });
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
    const res = await http('GET', `${svc.internal}/internal/device?${query}`, { token });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message, status: 400 });
  });
});

// 8 ------------------------------------------------------------------------------------------
describe('odd or unknown ids on PUT and DELETE /device/{id}', () => {
  let token: string;
  let t: any;
  let keep: any;
  beforeAll(async () => {
    token = await freshTenant('ids');
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
    const res = await http('PUT', `${svc.base}/device/${path}`, { token, body: { label: 'x', templates: [t.id] } });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such device: ${id}`, status: 404 });
    expect(await deviceCount(token)).toBe(count);
    expect(await getDevice(svc.base, token, 'ab')).toEqual(keep);
  });

  it.each(ids)('DELETE /device/%s: 404', async (path, id) => {
    const count = await deviceCount(token);
    const res = await http('DELETE', `${svc.base}/device/${path}`, { token });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such device: ${id}`, status: 404 });
    expect(await deviceCount(token)).toBe(count);
    expect(await getDevice(svc.base, token, 'ab')).toEqual(keep);
  });

  it.each(ids)('PUT /device/%s with an invalid body: 400 (the body is checked first)', async (path) => {
    const missing = await http('PUT', `${svc.base}/device/${path}`, { token, body: { templates: [] } });
    expect(missing.status).toBe(400);
    expect(missing.body).toEqual({ message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } });
    const wrongType = await http('PUT', `${svc.base}/device/${path}`, { token, body: { label: 'x', templates: 'all' } });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body).toEqual({ message: 'failed to parse input', errors: { templates: ['Not a valid list.'] } });
    const notJson = await http('PUT', `${svc.base}/device/${path}`, { token, rawBody: '{"label":', headers: { 'content-type': 'application/json' } });
    expect(notJson.status).toBe(400);
    expect(notJson.body).toEqual(NOT_JSON);
    expect(await getDevice(svc.base, token, 'ab')).toEqual(keep);
  });
});

// 9 ------------------------------------------------------------------------------------------
describe('POST /device: spellings of verbose and count', () => {
  let token: string;
  let t: any;
  beforeAll(async () => {
    token = await freshTenant('qs');
    t = await createTemplate(svc.base, token, sensor());
  });
  const post = (query: string, label = 'v') => http('POST', `${svc.base}/device${query}`, { token, body: { label, templates: [t.id] } });

  it.each(['?verbose=TRUE', '?verbose=1', '?verbose=True', '?verbose', '?count=%2B1&verbose=TRUE'])('%s: the full device', async (query) => {
    const res = await post(query);
    expect(res.status, res.text).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['devices', 'message']);
    expect(res.body.message).toBe('device created');
    expect(res.body.devices).toHaveLength(1);
    const [d] = res.body.devices;
    expect(Object.keys(d)).toEqual(VIEW_KEYS);
    expect(d).toMatchObject({ label: 'v_0', templates: [String(t.id)] });
    expect(d.attrs[String(t.id)].map((a: any) => a.label)).toEqual(['temperature', 'serial', 'led']);
    expect(d).toEqual(await getDevice(svc.base, token, d.id));
  });

  it.each(['?verbose=yes', '?verbose=false', '?verbose=0', '?verbose=on', '?verbose=2'])('%s: the short form', async (query) => {
    const res = await post(query);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ message: 'devices created', devices: [{ id: expect.stringMatching(/^[0-9a-f]{6}$/), label: 'v_0' }] });
  });

  it.each(['?count=%2B2', '?count=%202%20', '?count=02', '?count=2&verbose=yes'])('%s: two devices', async (query) => {
    const before = await deviceCount(token);
    const res = await post(query, 'two');
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({
      message: 'devices created',
      devices: [
        { id: expect.stringMatching(/^[0-9a-f]{6}$/), label: 'two_0' },
        { id: expect.stringMatching(/^[0-9a-f]{6}$/), label: 'two_1' },
      ],
    });
    expect(await deviceCount(token)).toBe(before + 2);
  });

  it('count=+2 as typed (a bare `+` in a query): two devices too', async () => {
    const before = await deviceCount(token);
    const res = await post('?count=+2', 'plus');
    expect(res.status, res.text).toBe(200);
    expect(res.body.devices.map((d: any) => d.label)).toEqual(['plus_0', 'plus_1']);
    expect(await deviceCount(token)).toBe(before + 2);
  });

  it.each<[string, string]>([
    ['?count=2.0', 'If provided, count must be integer'],
    ['?count=1e1', 'If provided, count must be integer'],
    ['?count=-0', 'If provided, count must be integer'],
    ['?count=0x2', 'If provided, count must be integer'],
    // beyond 2^53 - 1 the number cannot be held exactly: not an integer, not "too large"
    ['?count=9007199254740993', 'If provided, count must be integer'],
    ['?count=9007199254740991', 'count must be at most 10000'],
    ['?count=%202%20&verbose=1', 'Verbose can only be used for single device creation'],
  ])('%s: 400 %s, nothing created', async (query, message) => {
    const before = await deviceCount(token);
    const res = await post(query, 'bad');
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message, status: 400 });
    expect(await deviceCount(token)).toBe(before);
  });
});

// 10 -----------------------------------------------------------------------------------------
describe('extra keys in POST and PUT bodies are ignored', () => {
  let token: string;
  let t: any;
  const OLD = '2000-01-01T00:00:00.000000+00:00';
  beforeAll(async () => {
    token = await freshTenant('extra');
    t = await createTemplate(svc.base, token, sensor());
  });

  it('POST: unknown keys, `created`, `updated` and extra keys in override entries', async () => {
    const before = await deviceCount(token);
    const res = await http('POST', `${svc.base}/device?verbose=true`, {
      token,
      body: {
        label: 'extra',
        templates: [t.id],
        foo: 1,
        created: OLD,
        updated: OLD,
        attrs: [{ label: 'serial', static_value: 'S-1', foo: 1, type: 'dynamic', value_type: 'integer', created: OLD, is_static_overridden: false }],
      },
    });
    expect(res.status, res.text).toBe(200);
    const d = res.body.devices[0];
    expect(Object.keys(d)).toEqual(VIEW_KEYS);
    expect(d.created).toMatch(TS);
    expect(d.created).not.toBe(OLD);
    expect(d.attrs[String(t.id)][1]).toEqual({ ...t.attrs[1], static_value: 'S-1', is_static_overridden: true });
    expect(await getDevice(svc.base, token, d.id)).toEqual(d);
    expect(await deviceCount(token)).toBe(before + 1);
  });

  it('PUT: an `id` other than the path\'s, `created`, `updated`, unknown keys', async () => {
    await createDevices(svc.base, token, { id: 'aa', label: 'put', templates: [] });
    const before = await getDevice(svc.base, token, 'aa');
    const count = await deviceCount(token);
    const res = await http('PUT', `${svc.base}/device/aa`, {
      token,
      body: { id: 'bb', label: 'renamed', templates: [t.id], created: OLD, updated: OLD, foo: { bar: 1 }, attrs: [{ label: 'serial', static_value: 'S-2', bar: [1] }] },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.message).toBe('device updated');
    const d = res.body.device;
    expect(d).toMatchObject({ id: 'aa', label: 'renamed', created: before.created, templates: [String(t.id)] });
    expect(d.updated).toMatch(TS);
    expect(d.updated).not.toBe(OLD);
    expect(Object.keys(d)).not.toContain('foo');
    expect(d.attrs[String(t.id)][1]).toMatchObject({ static_value: 'S-2', is_static_overridden: true });
    expect(await getDevice(svc.base, token, 'aa')).toEqual(d);
    expect((await http('GET', `${svc.base}/device/bb`, { token })).status).toBe(404);
    expect(await deviceCount(token)).toBe(count);
  });

  it('a GET answer, less its `attrs` view, sent back as a PUT body changes nothing but `updated`', async () => {
    await createDevices(svc.base, token, { id: 'cc', label: 'back', templates: [t.id] });
    const view = await getDevice(svc.base, token, 'cc');
    const { attrs: _attrs, ...body } = view;
    const res = await http('PUT', `${svc.base}/device/cc`, { token, body });
    expect(res.status, res.text).toBe(200);
    const { updated, ...rest } = res.body.device;
    expect(updated).toMatch(TS);
    expect(rest).toEqual(view); // label stays `back_0`: PUT adds no suffix
  });

  it('the whole GET answer: its `attrs` (an object keyed by template id) is no override list: 400, nothing changed', async () => {
    // The override list (decisions.md) is a list; the view's `attrs` is not one, so it is refused as a whole.
    await createDevices(svc.base, token, { id: 'dd', label: 'whole', templates: [t.id] });
    const view = await getDevice(svc.base, token, 'dd');
    const res = await http('PUT', `${svc.base}/device/dd`, { token, body: view });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'failed to parse input', errors: { attrs: ['Not a valid list.'] } });
    expect(await getDevice(svc.base, token, 'dd')).toEqual(view);
  });
});

// 11 -----------------------------------------------------------------------------------------
describe('tenant isolation of PUT and DELETE', () => {
  let a: string;
  let b: string;
  let tA: any;
  let tB: any;
  let aViews: any[];
  beforeAll(async () => {
    a = await freshTenant('iso-a');
    b = await freshTenant('iso-b');
    tA = await createTemplate(svc.base, a, sensor());
    tB = await createTemplate(svc.base, b, { label: 'Other', attrs: [{ label: 'level', type: 'dynamic', value_type: 'integer' }] });
    await createDevices(svc.base, a, { id: 'beef', label: 'a-beef', templates: [tA.id], attrs: [{ label: 'serial', static_value: 'A' }] });
    await createDevices(svc.base, a, { id: 'f00d', label: 'a-food', templates: [tA.id] });
    await createDevices(svc.base, a, { label: 'a-more', templates: [tA.id] }, '?count=3');
    await createDevices(svc.base, b, { id: 'beef', label: 'b-beef', templates: [tB.id] });
    aViews = await Promise.all((await idsOf(a)).map((id) => getDevice(svc.base, a, id)));
    expect(aViews).toHaveLength(5);
  });
  const aUnchanged = async () => {
    expect(await Promise.all(aViews.map((v) => getDevice(svc.base, a, v.id)))).toEqual(aViews);
    expect(await idsOf(a)).toEqual(aViews.map((v) => v.id));
  };

  it('PUT on the shared id changes the caller\'s device only', async () => {
    const res = await http('PUT', `${svc.base}/device/beef`, { token: b, body: { label: 'b-renamed', templates: [tB.id] } });
    expect(res.status, res.text).toBe(200);
    expect(res.body.device).toMatchObject({ id: 'beef', label: 'b-renamed', templates: [String(tB.id)] });
    expect(await getDevice(svc.base, b, 'beef')).toEqual(res.body.device);
    await aUnchanged();
  });

  it('PUT on an id only the other tenant has: 404; with the other tenant\'s template: 404 No such template', async () => {
    const res = await http('PUT', `${svc.base}/device/f00d`, { token: b, body: { label: 'stolen', templates: [tB.id] } });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: 'No such device: f00d', status: 404 });
    const viaTemplate = await http('PUT', `${svc.base}/device/beef`, { token: b, body: { label: 'x', templates: [tA.id] } });
    expect(viaTemplate.status).toBe(404);
    expect(viaTemplate.body).toEqual({ message: `No such template: ${tA.id}`, status: 404 });
    await aUnchanged();
  });

  it('DELETE on an id only the other tenant has: 404; on the shared id: the caller\'s device only', async () => {
    const miss = await http('DELETE', `${svc.base}/device/f00d`, { token: b });
    expect(miss.status).toBe(404);
    expect(miss.body).toEqual({ message: 'No such device: f00d', status: 404 });
    const bView = await getDevice(svc.base, b, 'beef');
    const res = await http('DELETE', `${svc.base}/device/beef`, { token: b });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ removed_device: bView, result: 'ok' });
    expect((await http('GET', `${svc.base}/device/beef`, { token: b })).status).toBe(404);
    await aUnchanged();
  });

  it('DELETE /device removes the caller\'s devices only', async () => {
    const made = await createDevices(svc.base, b, { label: 'b-many', templates: [tB.id] }, '?count=2');
    await createDevices(svc.base, b, { id: 'beef', label: 'b-again', templates: [] });
    const res = await http('DELETE', `${svc.base}/device`, { token: b });
    expect(res.status).toBe(200);
    expect(res.body.result).toBe('ok');
    expect(res.body.removed_devices.map((d: any) => d.id).sort()).toEqual([...made.map((d) => d.id), 'beef'].sort());
    expect(await idsOf(b)).toEqual([]);
    await aUnchanged();
  });
});
