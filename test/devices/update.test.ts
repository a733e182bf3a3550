import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceUpdated, TemplateView } from '../helpers/api.js';
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

const put = (id: string, body: unknown) => http<DeviceUpdated>('PUT', `${svc.base}/device/${id}`, { token: svc.token, body });

describe('PUT /device/{id}', () => {
  it('replaces label, templates and overrides: {message, device} with updated', async () => {
    const [{ id }] = await createDevices(svc.base, svc.token, {
      label: 'dev',
      templates: [thermo.id],
      attrs: [{ label: 'serial', static_value: 'SN-1' }],
    });
    const before = await getDevice(svc.base, svc.token, id);
    const res = await put(id, {
      label: 'renamed',
      templates: [thermo.id, loc.id],
      attrs: [{ label: 'vendor', template_id: loc.id, static_value: 'initech' }],
    });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['device', 'message']);
    expect(res.body.message).toBe('device updated');
    const d = res.body.device;
    expect(d.label).toBe('renamed'); // no suffix on update
    expect(d.created).toBe(before.created);
    expect(d.updated).toMatch(TS);
    expect(d.templates).toEqual([String(thermo.id), String(loc.id)]);
    // the serial override was not in the new list: gone
    expect(d.attrs[String(thermo.id)]![1]).toMatchObject({ static_value: 'undefined', is_static_overridden: false });
    expect(d.attrs[String(loc.id)]![1]).toMatchObject({ static_value: 'initech', is_static_overridden: true });
    expect(await getDevice(svc.base, svc.token, id)).toEqual(d);
  });

  it('removing a template removes its attributes from the device', async () => {
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'dev', templates: [thermo.id, loc.id] });
    const d = (await put(id, { label: 'dev', templates: [loc.id] })).body.device;
    expect(d.templates).toEqual([String(loc.id)]);
    expect(Object.keys(d.attrs)).toEqual([String(loc.id)]);
  });

  it('the body is checked before the device is looked up (400 before 404)', async () => {
    const res = await put('doesnotexist', { templates: [] });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } });
    const bad = await http('PUT', `${svc.base}/device/doesnotexist`, {
      token: svc.token,
      rawBody: 'nope',
      headers: { 'content-type': 'application/json' },
    });
    expect(bad.body).toEqual({ message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 });
  });

  it.each(['doesnotexist', 'zz'])('unknown device %s: 404', async (id) => {
    const res = await put(id, { label: 'x', templates: [] });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ message: `No such device: ${id}`, status: 404 });
  });

  describe('bad input changes nothing', () => {
    const cases = (): Array<[string, unknown, number, unknown]> => [
      ['unknown template', { label: 'x', templates: [thermo.id, 4865] }, 404, { message: 'No such template: 4865', status: 404 }],
      [
        'templates with repeated attributes',
        { label: 'x', templates: [thermo.id, loc.id, 'TWIN'] },
        400,
        { message: 'failed to parse input', errors: { templates: { '2': ['Not a valid integer.'] } } },
      ],
      [
        'override without label',
        { label: 'x', templates: [thermo.id], attrs: [{ static_value: 'a' }] },
        400,
        { message: ['missing label attribute'], status: 400 },
      ],
      [
        'an override naming a template the device will not have',
        { label: 'x', templates: [thermo.id], attrs: [{ label: 'vendor', template_id: String(loc.id), static_value: 'a' }] },
        400,
        { message: `Unknown template ${loc.id} in attr list`, status: 400 },
      ],
      [
        'an unknown attribute: HTTP 404, body status 400',
        { label: 'x', templates: [thermo.id], attrs: [{ id: 987654, label: 'two', static_value: 'a' }] },
        404,
        { message: 'Unknown attribute 987654 in override list', status: 400 },
      ],
      [
        'an unknown metadata entry: HTTP 404, body status 400',
        {
          label: 'x',
          templates: [thermo.id],
          attrs: [{ id: thermo.attrs[1]!.id, label: 'serial', metadata: [{ id: 2, static_value: 'a' }] }],
        },
        404,
        { message: 'Unknown metadata attribute 2 in override list', status: 400 },
      ],
      [
        'the same attribute twice in the override list',
        {
          label: 'x',
          templates: [thermo.id],
          attrs: [
            { id: thermo.attrs[1]!.id, label: 'a', static_value: 'A' },
            { id: thermo.attrs[1]!.id, label: 'b', static_value: 'B' },
          ],
        },
        400,
        { message: ['a device can not have repeated attributes'], status: 400 },
      ],
      [
        'the same metadata attribute twice in one entry',
        {
          label: 'x',
          templates: [thermo.id],
          attrs: [
            {
              id: thermo.attrs[1]!.id,
              label: 'serial',
              metadata: [
                { id: thermo.attrs[1]!.metadata![0]!.id, static_value: 'A' },
                { id: thermo.attrs[1]!.metadata![0]!.id, static_value: 'B' },
              ],
            },
          ],
        },
        400,
        { message: ['a device can not have repeated attributes'], status: 400 },
      ],
    ];
    const names = [
      'unknown template',
      'templates with repeated attributes',
      'override without label',
      'an override naming a template the device will not have',
      'an unknown attribute: HTTP 404, body status 400',
      'an unknown metadata entry: HTTP 404, body status 400',
      'the same attribute twice in the override list',
      'the same metadata attribute twice in one entry',
    ];
    it.each(names)('%s', async (name) => {
      const [, body, status, expected] = cases().find((c) => c[0] === name)!;
      const [{ id }] = await createDevices(svc.base, svc.token, {
        label: 'keep',
        templates: [thermo.id],
        attrs: [{ label: 'serial', static_value: 'S' }],
      });
      const before = await getDevice(svc.base, svc.token, id);
      const res = await put(id, body);
      expect(res.status).toBe(status);
      expect(res.body).toEqual(expected);
      expect(await getDevice(svc.base, svc.token, id)).toEqual(before);
    });

    it('templates that would give the device repeated attributes: 400', async () => {
      const twin = await createTemplate(svc.base, svc.token, {
        label: 'twin',
        attrs: [{ label: 'vendor', type: 'dynamic', value_type: 'string' }],
      });
      const [{ id }] = await createDevices(svc.base, svc.token, { label: 'keep', templates: [loc.id] });
      const before = await getDevice(svc.base, svc.token, id);
      const res = await put(id, { label: 'x', templates: [loc.id, twin.id] });
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ message: ['a device can not have repeated attributes'], status: 400 });
      expect(await getDevice(svc.base, svc.token, id)).toEqual(before);
    });
  });
});
