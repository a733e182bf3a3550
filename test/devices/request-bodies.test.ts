// POST and PUT /device bodies at their edges: Content-Type parameters, and keys that are not the
// route's (unknown ones, `created`, `updated`, another `id`), which are ignored. Each describe
// block works in a fresh tenant.
import { beforeAll, describe, expect, it } from 'vitest';
import type { DevicesCreated, DeviceUpdated, DeviceView, TemplateView } from '../helpers/api.js';
import { stringMatching } from '../helpers/matchers.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { deviceQueries, NOT_JSON, sensor, TS, VIEW_KEYS } from './fixtures.js';

const svc = useService();
const { deviceCount } = deviceQueries(svc);

describe('Content-Type on POST and PUT /device', () => {
  let token: string;
  let t: TemplateView;
  beforeAll(async () => {
    token = (await svc.freshTenant('ctype')).token;
    t = await createTemplate(svc.base, token, sensor());
    await createDevices(svc.base, token, { id: 'c2', label: 'keep', templates: [t.id] });
  });

  it.each(['application/json; charset=utf-8', 'application/json;charset=UTF-8'])('POST with %s: created', async (type) => {
    const before = await deviceCount(token);
    const res = await http<DevicesCreated>('POST', `${svc.base}/device`, {
      token,
      rawBody: JSON.stringify({ label: 'ct', templates: [t.id] }),
      headers: { 'content-type': type },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ message: 'devices created', devices: [{ id: stringMatching(/^[0-9a-f]{6}$/), label: 'ct_0' }] });
    expect(await deviceCount(token)).toBe(before + 1);
    expect((await getDevice(svc.base, token, res.body.devices[0]!.id)).templates).toEqual([String(t.id)]);
  });

  it('PUT with application/json; charset=utf-8: updated', async () => {
    await createDevices(svc.base, token, { id: 'c1', label: 'put', templates: [] });
    const res = await http<DeviceUpdated>('PUT', `${svc.base}/device/c1`, {
      token,
      rawBody: JSON.stringify({ label: 'renamed', templates: [t.id] }),
      headers: { 'content-type': 'application/json; charset=utf-8' },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.message).toBe('device updated');
    expect(res.body.device).toMatchObject({ id: 'c1', label: 'renamed', templates: [String(t.id)], updated: stringMatching(TS) });
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

describe('extra keys in POST and PUT bodies are ignored', () => {
  let token: string;
  let t: TemplateView;
  const OLD = '2000-01-01T00:00:00.000000+00:00';
  beforeAll(async () => {
    token = (await svc.freshTenant('extra')).token;
    t = await createTemplate(svc.base, token, sensor());
  });

  it('POST: unknown keys, `created`, `updated` and extra keys in override entries', async () => {
    const before = await deviceCount(token);
    const res = await http<DevicesCreated<DeviceView>>('POST', `${svc.base}/device?verbose=true`, {
      token,
      body: {
        label: 'extra',
        templates: [t.id],
        foo: 1,
        created: OLD,
        updated: OLD,
        attrs: [
          {
            label: 'serial',
            static_value: 'S-1',
            foo: 1,
            type: 'dynamic',
            value_type: 'integer',
            created: OLD,
            is_static_overridden: false,
          },
        ],
      },
    });
    expect(res.status, res.text).toBe(200);
    const d = res.body.devices[0]!;
    expect(Object.keys(d)).toEqual(VIEW_KEYS);
    expect(d.created).toMatch(TS);
    expect(d.created).not.toBe(OLD);
    expect(d.attrs[String(t.id)]![1]).toEqual({ ...t.attrs[1], static_value: 'S-1', is_static_overridden: true });
    expect(await getDevice(svc.base, token, d.id)).toEqual(d);
    expect(await deviceCount(token)).toBe(before + 1);
  });

  it("PUT: an `id` other than the path's, `created`, `updated`, unknown keys", async () => {
    await createDevices(svc.base, token, { id: 'aa', label: 'put', templates: [] });
    const before = await getDevice(svc.base, token, 'aa');
    const count = await deviceCount(token);
    const res = await http<DeviceUpdated>('PUT', `${svc.base}/device/aa`, {
      token,
      body: {
        id: 'bb',
        label: 'renamed',
        templates: [t.id],
        created: OLD,
        updated: OLD,
        foo: { bar: 1 },
        attrs: [{ label: 'serial', static_value: 'S-2', bar: [1] }],
      },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.message).toBe('device updated');
    const d = res.body.device;
    expect(d).toMatchObject({ id: 'aa', label: 'renamed', created: before.created, templates: [String(t.id)] });
    expect(d.updated).toMatch(TS);
    expect(d.updated).not.toBe(OLD);
    expect(Object.keys(d)).not.toContain('foo');
    expect(d.attrs[String(t.id)]![1]).toMatchObject({ static_value: 'S-2', is_static_overridden: true });
    expect(await getDevice(svc.base, token, 'aa')).toEqual(d);
    expect((await http('GET', `${svc.base}/device/bb`, { token })).status).toBe(404);
    expect(await deviceCount(token)).toBe(count);
  });

  it('a GET answer, less its `attrs` view, sent back as a PUT body changes nothing but `updated`', async () => {
    await createDevices(svc.base, token, { id: 'cc', label: 'back', templates: [t.id] });
    const view = await getDevice(svc.base, token, 'cc');
    const { attrs: _attrs, ...body } = view;
    const res = await http<DeviceUpdated>('PUT', `${svc.base}/device/cc`, { token, body });
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
