import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceRef, DevicesCreated, DeviceView, TemplateView } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { stringMatching } from '../helpers/matchers.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { locator, thermometer, TS } from './fixtures.js';

const svc = useService();
let thermo: TemplateView;
let loc: TemplateView;

beforeAll(async () => {
  thermo = await createTemplate(svc.base, svc.token, thermometer);
  loc = await createTemplate(svc.base, svc.token, locator);
});

const post = <D = DeviceRef>(body: unknown, query = '') =>
  http<DevicesCreated<D>>('POST', `${svc.base}/device${query}`, { token: svc.token, body });
const deviceCount = () => countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM devices');

describe('POST /device', () => {
  it('one device: label suffixed _0, a 6-hex id, message "devices created"', async () => {
    const res = await post({ label: 'therm', templates: [thermo.id] });
    expect(res.status).toBe(200);
    expect(res.body.message).toBe('devices created');
    expect(res.body.devices).toHaveLength(1);
    expect(res.body.devices[0]).toEqual({ id: stringMatching(/^[0-9a-f]{6}$/), label: 'therm_0' });
  });

  it('the device view: string template ids, attrs keyed by template id, no updated, is_static_overridden', async () => {
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'both', templates: [String(loc.id), thermo.id] });
    const d = await getDevice(svc.base, svc.token, id);
    expect(Object.keys(d)).toEqual(['id', 'label', 'created', 'templates', 'attrs']);
    expect(d.id).toBe(id);
    expect(d.label).toBe('both_0');
    expect(d.created).toMatch(TS);
    expect(d.templates).toEqual([String(thermo.id), String(loc.id)]);
    expect(Object.keys(d.attrs)).toEqual([String(thermo.id), String(loc.id)]);
    const [temperature, serial, led] = d.attrs[String(thermo.id)]!;
    expect(temperature).toEqual({ ...thermo.attrs[0] });
    expect(serial).toEqual({
      ...thermo.attrs[1],
      is_static_overridden: false,
      metadata: [{ ...thermo.attrs[1]!.metadata![0], is_static_overridden: false }],
    });
    expect(led).not.toHaveProperty('is_static_overridden');
    expect(d.attrs[String(loc.id)]!.map((a) => a.label)).toEqual(['position', 'vendor']);
    expect(d.attrs[String(loc.id)]![1]).toMatchObject({ static_value: 'acme', is_static_overridden: false, template_id: String(loc.id) });
  });

  it('a template listed more than once (as a number, a string, with leading zeros) counts once', async () => {
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'dup', templates: [thermo.id, String(thermo.id), `0${thermo.id}`] });
    const d = await getDevice(svc.base, svc.token, id);
    expect(d.templates).toEqual([String(thermo.id)]);
    expect(d.attrs[String(thermo.id)]!.map((a) => a.label)).toEqual(thermo.attrs.map((a) => a.label));
  });

  it('ids with a plus sign ("+5" is 5) in templates and the override list (found by an audit: 400 "Not a valid integer.")', async () => {
    const serial = thermo.attrs[1]!;
    const res = await post<DeviceView>(
      {
        label: 'plus',
        templates: [`+${thermo.id}`, thermo.id],
        attrs: [
          {
            id: `+${serial.id}`,
            template_id: `+${thermo.id}`,
            label: 'serial',
            static_value: 'SN-plus',
            metadata: [{ id: `+${serial.metadata![0]!.id}`, static_value: 'mp' }],
          },
        ],
      },
      '?verbose=true',
    );
    expect(res.status).toBe(200);
    const d = res.body.devices[0]!;
    expect(d.templates).toEqual([String(thermo.id)]);
    const s = d.attrs[String(thermo.id)]![1]!;
    expect(s).toMatchObject({ static_value: 'SN-plus', is_static_overridden: true });
    expect(s.metadata![0]).toMatchObject({ static_value: 'mp', is_static_overridden: true });
    const put = await http<{ device: DeviceView }>('PUT', `${svc.base}/device/${d.id}`, {
      token: svc.token,
      body: { label: 'plus', templates: [`+${thermo.id}`, `+${loc.id}`] },
    });
    expect(put.status).toBe(200);
    expect(put.body.device.templates).toEqual([String(thermo.id), String(loc.id)]);
  });

  it('count=n: n devices labelled _0 .. _n-1 (no zero padding), distinct ids', async () => {
    const res = await post({ label: 'many', templates: [thermo.id] }, '?count=12');
    expect(res.status).toBe(200);
    expect(res.body.devices.map((d) => d.label)).toEqual(Array.from({ length: 12 }, (_, i) => `many_${i}`));
    expect(new Set(res.body.devices.map((d) => d.id)).size).toBe(12);
    for (const d of res.body.devices.slice(10)) expect((await getDevice(svc.base, svc.token, d.id)).label).toBe(d.label);
  });

  it('verbose=true (also 1, any case) with one device: the full device, message "device created"', async () => {
    for (const v of ['true', '1', 'TRUE']) {
      const res = await post<DeviceView>({ label: 'v', templates: [thermo.id] }, `?verbose=${v}`);
      expect(res.status).toBe(200);
      expect(res.body.message).toBe('device created');
      const [d] = res.body.devices;
      expect(d).toEqual(await getDevice(svc.base, svc.token, d!.id));
    }
    const off = await post({ label: 'v', templates: [thermo.id] }, '?verbose=false');
    expect(off.body.message).toBe('devices created');
  });

  it('no templates: a device with no attributes', async () => {
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'bare', templates: [] });
    expect(await getDevice(svc.base, svc.token, id)).toMatchObject({ templates: [], attrs: {} });
  });

  it('a client-chosen id (hex, 2-6 characters)', async () => {
    const res = await post({ label: 'mine', templates: [thermo.id], id: 'C0FFEE' });
    expect(res.body.devices).toEqual([{ id: 'C0FFEE', label: 'mine_0' }]);
    expect((await getDevice(svc.base, svc.token, 'C0FFEE')).label).toBe('mine_0');
  });

  it("the override list sets the device's own static values", async () => {
    const serial = thermo.attrs[1]!;
    const res = await post<DeviceView>(
      {
        label: 'own',
        templates: [thermo.id, loc.id],
        attrs: [
          {
            id: serial.id,
            template_id: String(thermo.id),
            label: 'serial',
            static_value: 'SN-1',
            metadata: [{ id: serial.metadata![0]!.id, static_value: 'mm' }],
          },
          { label: 'vendor', static_value: 'initech' },
        ],
      },
      '?verbose=true',
    );
    expect(res.status).toBe(200);
    const d = res.body.devices[0]!;
    const s = d.attrs[String(thermo.id)]![1]!;
    expect(s).toMatchObject({ static_value: 'SN-1', is_static_overridden: true });
    expect(s.metadata![0]).toMatchObject({ static_value: 'mm', is_static_overridden: true });
    expect(d.attrs[String(loc.id)]![1]).toMatchObject({ static_value: 'initech', is_static_overridden: true });
    // the template is untouched
    expect((await http('GET', `${svc.base}/template/${thermo.id}`, { token: svc.token })).body).toEqual(thermo);
  });
});

describe('POST /device: bad input changes nothing', () => {
  const cases = (): Array<[string, unknown, string, number, unknown]> => [
    [
      'count not an integer',
      { label: 'x', templates: [] },
      '?count=abc',
      400,
      { message: 'If provided, count must be integer', status: 400 },
    ],
    ['count empty', { label: 'x', templates: [] }, '?count=', 400, { message: 'If provided, count must be integer', status: 400 }],
    ['count 0', { label: 'x', templates: [] }, '?count=0', 400, { message: 'If provided, count must be integer', status: 400 }],
    ['count negative', { label: 'x', templates: [] }, '?count=-2', 400, { message: 'If provided, count must be integer', status: 400 }],
    ['count 1.5', { label: 'x', templates: [] }, '?count=1.5', 400, { message: 'If provided, count must be integer', status: 400 }],
    [
      'count above the maximum',
      { label: 'x', templates: [] },
      '?count=10001',
      400,
      { message: 'count must be at most 10000', status: 400 },
    ],
    [
      'verbose with count > 1',
      { label: 'x', templates: [] },
      '?count=2&verbose=true',
      400,
      { message: 'Verbose can only be used for single device creation', status: 400 },
    ],
    [
      'label missing',
      { templates: [] },
      '',
      400,
      { message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } },
    ],
    [
      'templates missing',
      { label: 'x' },
      '',
      400,
      { message: 'failed to parse input', errors: { templates: ['Missing data for required field.'] } },
    ],
    [
      'a template id that is not an integer',
      { label: 'x', templates: [thermo.id, 'abc', 1.5] },
      '',
      400,
      { message: 'failed to parse input', errors: { templates: { '1': ['Not a valid integer.'], '2': ['Not a valid integer.'] } } },
    ],
    [
      'label not a string',
      { label: 3, templates: [] },
      '',
      400,
      { message: 'failed to parse input', errors: { label: ['Not a valid string.'] } },
    ],
    [
      'label too long',
      { label: 'l'.repeat(129), templates: [] },
      '',
      400,
      { message: 'failed to parse input', errors: { label: ['Longer than maximum length 128.'] } },
    ],
    ['unknown template', { label: 'x', templates: [thermo.id, 4865] }, '', 404, { message: 'No such template: 4865', status: 404 }],
    ['unknown template as a string', { label: 'x', templates: ['99999'] }, '', 404, { message: 'No such template: 99999', status: 404 }],
    [
      'a negative template id, as a number or a string',
      { label: 'x', templates: [thermo.id, '-1', -1] },
      '',
      404,
      { message: 'No such template: -1', status: 404 },
    ],
    [
      'the same attribute id twice in the override list',
      {
        label: 'x',
        templates: [thermo.id],
        attrs: [
          { id: thermo.attrs[1]!.id, label: 'a', static_value: 'A' },
          { id: thermo.attrs[1]!.id, label: 'b', static_value: 'B' },
        ],
      },
      '',
      400,
      { message: ['a device can not have repeated attributes'], status: 400 },
    ],
    [
      'a template id that is a word',
      { label: 'x', templates: [thermo.id, 'DUP'] },
      '',
      400,
      { message: 'failed to parse input', errors: { templates: { '1': ['Not a valid integer.'] } } },
    ],
    [
      'bad device id',
      { label: 'x', templates: [], id: 'xyz' },
      '',
      400,
      { message: ['Device ID must be 2-6 characters and must be hexadecimal (0-9,a-f,A-F).'], status: 400 },
    ],
    [
      'device id too long',
      { label: 'x', templates: [], id: 'abcdef0' },
      '',
      400,
      { message: ['Device ID must be 2-6 characters and must be hexadecimal (0-9,a-f,A-F).'], status: 400 },
    ],
    [
      'device id too short',
      { label: 'x', templates: [], id: 'a' },
      '',
      400,
      { message: ['Device ID must be 2-6 characters and must be hexadecimal (0-9,a-f,A-F).'], status: 400 },
    ],
    [
      'device id not a string',
      { label: 'x', templates: [], id: 1234 },
      '',
      400,
      { message: ['Device ID must be 2-6 characters and must be hexadecimal (0-9,a-f,A-F).'], status: 400 },
    ],
    [
      'device id with count',
      { label: 'x', templates: [], id: 'abcd' },
      '?count=2',
      400,
      { message: 'A device ID can only be given for single device creation', status: 400 },
    ],
    [
      'override without label',
      { label: 'x', templates: [thermo.id], attrs: [{ id: 1, static_value: 'a' }] },
      '',
      400,
      { message: ['missing label attribute'], status: 400 },
    ],
    [
      'override with an empty label',
      { label: 'x', templates: [thermo.id], attrs: [{ label: '', static_value: 'a' }] },
      '',
      400,
      { message: ['missing label attribute'], status: 400 },
    ],
    [
      'the same label twice in the override list',
      {
        label: 'x',
        templates: [thermo.id],
        attrs: [
          { label: 'serial', static_value: 'a' },
          { label: 'serial', static_value: 'b' },
        ],
      },
      '',
      400,
      { message: ['a device can not have repeated attributes'], status: 400 },
    ],
    [
      'override of a template the device does not have',
      { label: 'x', templates: [thermo.id], attrs: [{ label: 'vendor', template_id: String(loc.id), static_value: 'a' }] },
      '',
      400,
      { message: `Unknown template ${loc.id} in attr list`, status: 400 },
    ],
    [
      'override naming a template id that is no number',
      { label: 'x', templates: [thermo.id], attrs: [{ label: 'vendor', template_id: 'abc', static_value: 'a' }] },
      '',
      400,
      { message: 'Unknown template abc in attr list', status: 400 },
    ],
    [
      'override of an unknown attribute: HTTP 404, body status 400',
      { label: 'x', templates: [thermo.id], attrs: [{ id: 987654, label: 'nope', static_value: 'a' }] },
      '',
      404,
      { message: 'Unknown attribute 987654 in override list', status: 400 },
    ],
    [
      'override of an unknown metadata entry: HTTP 404, body status 400',
      {
        label: 'x',
        templates: [thermo.id],
        attrs: [{ id: thermo.attrs[1]!.id, label: 'serial', metadata: [{ id: 2, static_value: 'a' }] }],
      },
      '',
      404,
      { message: 'Unknown metadata attribute 2 in override list', status: 400 },
    ],
    [
      'override value an object',
      { label: 'x', templates: [thermo.id], attrs: [{ label: 'serial', static_value: { a: 1 } }] },
      '',
      400,
      { message: 'failed to parse input', errors: { attrs: { '0': { static_value: ['Not a valid string.'] } } } },
    ],
  ];

  // The table refers to templates created in beforeAll: build it when the test runs.
  const names = [
    'count not an integer',
    'count empty',
    'count 0',
    'count negative',
    'count 1.5',
    'count above the maximum',
    'verbose with count > 1',
    'label missing',
    'templates missing',
    'a template id that is not an integer',
    'label not a string',
    'label too long',
    'unknown template',
    'unknown template as a string',
    'a negative template id, as a number or a string',
    'the same attribute id twice in the override list',
    'a template id that is a word',
    'bad device id',
    'device id too long',
    'device id too short',
    'device id not a string',
    'device id with count',
    'override without label',
    'override with an empty label',
    'the same label twice in the override list',
    'override of a template the device does not have',
    'override naming a template id that is no number',
    'override of an unknown attribute: HTTP 404, body status 400',
    'override of an unknown metadata entry: HTTP 404, body status 400',
    'override value an object',
  ];
  it('the table names every case', () => expect(cases().map((c) => c[0])).toEqual(names));
  it.each(names)('%s', async (name) => {
    const [, body, query, status, expected] = cases().find((c) => c[0] === name)!;
    const before = await deviceCount();
    const res = await post(body, query);
    expect(res.status).toBe(status);
    expect(res.body).toEqual(expected);
    expect(await deviceCount()).toBe(before);
  });

  it('templates that would give repeated attributes: 400, nothing created', async () => {
    const twin = await createTemplate(svc.base, svc.token, {
      label: 'twin',
      attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'integer' }],
    });
    const before = await deviceCount();
    const res = await post({ label: 'x', templates: [thermo.id, twin.id] }, '?count=3');
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: ['a device can not have repeated attributes'], status: 400 });
    expect(await deviceCount()).toBe(before);
  });

  it('a client id already in use: 400, nothing created', async () => {
    await createDevices(svc.base, svc.token, { label: 'first', templates: [], id: 'abcd' });
    const before = await deviceCount();
    const res = await post({ label: 'second', templates: [thermo.id], id: 'abcd' });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'Device ID abcd is already in use', status: 400 });
    expect(await deviceCount()).toBe(before);
  });

  it('a body that is not JSON, or not sent as JSON: 400', async () => {
    const expected = { message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 };
    const broken = await http('POST', `${svc.base}/device`, {
      token: svc.token,
      rawBody: '{"label":',
      headers: { 'content-type': 'application/json' },
    });
    expect(broken.status).toBe(400);
    expect(broken.body).toEqual(expected);
    const plain = await http('POST', `${svc.base}/device`, {
      token: svc.token,
      rawBody: JSON.stringify({ label: 'x', templates: [] }),
      headers: { 'content-type': 'text/plain' },
    });
    expect(plain.body).toEqual(expected);
  });
});
