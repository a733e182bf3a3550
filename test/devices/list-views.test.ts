// The public device lists write each device from the same cached view as GET /device/{id}: every
// change shows in the next page at once, whatever was read (and cached) before it.
import { describe, expect, it } from 'vitest';
import type { DeviceList, DevicesCreated, DeviceView, TemplateBodyWithAttrs, TemplateList } from '../helpers/api.js';
import { anyString } from '../helpers/matchers.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { http, login, startTestService, useService } from '../helpers/service.js';
import { thermometer } from './fixtures.js';

const svc = useService();

const page = async (path: string) => {
  const res = await http<DeviceList>('GET', `${svc.base}${path}`, { token: svc.token });
  expect(res.status, res.text).toBe(200);
  return res.body;
};

describe('device pages after changes', () => {
  it('show each change at once: update, key generation, template update, deletion', async () => {
    const psk: TemplateBodyWithAttrs = {
      label: 'Keyed',
      attrs: [...thermometer.attrs, { label: 'key', type: 'static', value_type: 'psk' }],
    };
    const t = await createTemplate(svc.base, svc.token, psk);
    const made = await createDevices(svc.base, svc.token, { label: 'v', templates: [t.id] }, '?count=3');
    const ids = made.map((d) => d.id).sort();
    const lists = [`/device?label=v_`, `/device/template/${t.id}`];
    for (const path of lists) await page(path); // every view cached now
    for (const id of ids) await getDevice(svc.base, svc.token, id);

    // PUT /device: the new label and `updated`.
    const put = await http('PUT', `${svc.base}/device/${ids[0]}`, { token: svc.token, body: { label: 'v_renamed', templates: [t.id] } });
    expect(put.status, put.text).toBe(200);
    // gen_psk: `updated`, and no key in the public view.
    expect((await http('POST', `${svc.base}/device/gen_psk/${ids[1]}?key_length=8`, { token: svc.token })).status).toBe(200);
    for (const path of lists) {
      const body = await page(path);
      const byId = new Map(body.devices.map((d) => [d.id, d]));
      expect(byId.get(ids[0]!)).toMatchObject({ label: 'v_renamed', updated: anyString() });
      expect(byId.get(ids[1]!)).toHaveProperty('updated');
      expect(JSON.stringify(body)).not.toMatch(/"key"[^}]*static_value/);
      for (const id of ids) expect(byId.get(id)).toEqual(await getDevice(svc.base, svc.token, id));
    }

    // A template update reaches every listed device.
    const changed = structuredClone(psk);
    changed.attrs.push({ label: 'humidity', type: 'dynamic', value_type: 'float' });
    expect((await http('PUT', `${svc.base}/template/${t.id}`, { token: svc.token, body: changed })).status).toBe(200);
    for (const path of lists) {
      for (const d of (await page(path)).devices) expect(d.attrs[String(t.id)]!.map((a) => a.label)).toContain('humidity');
    }

    // A deleted device leaves every page, and the page count follows.
    expect((await http('DELETE', `${svc.base}/device/${ids[2]}`, { token: svc.token })).status).toBe(200);
    for (const path of lists) {
      const body = await page(`${path}${path.includes('?') ? '&' : '?'}page_size=1`);
      expect(body.pagination).toEqual({ page: 1, total: 2, has_next: true, next_page: 2 });
      expect((await page(path)).devices.map((d) => d.id)).toEqual(ids.slice(0, 2));
    }
  });

  it('a page read again follows every change of which devices it holds (label, override, template, create, delete)', async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    const made = await createDevices(svc.base, svc.token, { label: 'm', templates: [t.id] }, '?count=3');
    const ids = made.map((d) => d.id);
    const idsOf = async (path: string) => (await page(path)).devices.map((d) => d.id).sort();
    const sorted = (xs: string[]) => [...xs].sort();
    const byLabel = '/device?label=m_&sortBy=label&page_size=2';
    const labelsOf = async () => (await page(byLabel)).devices.map((d) => d.label);
    const bySerial = '/device?attr=serial=SN-77';
    const geo = '/device?attr_type=geopoint&label=m_';
    const ofTemplate = `/device/template/${t.id}`;
    // Each page read once before the changes (and so cached).
    expect(await labelsOf()).toEqual(['m_0', 'm_1']);
    expect(await idsOf(bySerial)).toEqual([]);
    expect(await idsOf(geo)).toEqual([]);
    expect(await idsOf(ofTemplate)).toEqual(sorted(ids));

    // A new label moves the device in the label order.
    const put = (id: string, body: unknown) => http('PUT', `${svc.base}/device/${id}`, { token: svc.token, body });
    expect((await put(ids[0]!, { label: 'z', templates: [t.id] })).status).toBe(200);
    expect(await labelsOf()).toEqual(['m_1', 'm_2']);
    // An override makes the device match an attr filter.
    expect((await put(ids[1]!, { label: 'm_1', templates: [t.id], attrs: [{ label: 'serial', static_value: 'SN-77' }] })).status).toBe(200);
    expect(await idsOf(bySerial)).toEqual([ids[1]]);
    // A template update gives every device of it an attribute type.
    const withGeo = { ...thermometer, attrs: [...thermometer.attrs, { label: 'where', type: 'dynamic', value_type: 'geopoint' }] };
    expect((await http('PUT', `${svc.base}/template/${t.id}`, { token: svc.token, body: withGeo })).status).toBe(200);
    expect(await idsOf(geo)).toEqual(sorted([ids[1]!, ids[2]!]));
    // A new device and a deleted one.
    const [extra] = await createDevices(svc.base, svc.token, { label: 'm', templates: [t.id] });
    expect(await idsOf(ofTemplate)).toEqual(sorted([...ids, extra.id]));
    expect((await http('DELETE', `${svc.base}/device/${ids[1]}`, { token: svc.token })).status).toBe(200);
    expect(await idsOf(bySerial)).toEqual([]);
    expect(await idsOf(ofTemplate)).toEqual(sorted([ids[0]!, ids[2]!, extra.id]));
    expect(await labelsOf()).toEqual(['m_0', 'm_2']);
    expect((await page(byLabel)).pagination).toEqual({ page: 1, total: 1, has_next: false, next_page: null });
  });

  it("a second instance on the same database drops its cached pages and views on the first one's changes (NOTIFY)", async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    const [first] = await createDevices(svc.base, svc.token, { label: 'twin', templates: [t.id] });
    const other = await startTestService({ DATABASE_URL: svc.env.DATABASE_URL, PSK_ENCRYPTION_KEY: svc.env.PSK_ENCRYPTION_KEY });
    try {
      const otherToken = await login(other.base);
      const read = async <T>(path: string) => (await http<T>('GET', `${other.base}${path}`, { token: otherToken })).body;
      const labels = async () => (await read<DeviceList>('/device?label=twin&sortBy=label')).devices.map((d) => d.label);
      const templatePage = async () => (await read<TemplateList>('/template?label=Thermo&page_size=100')).templates.map((x) => x.id);
      // Cached on the second instance: the page, the count, the view, the template page.
      expect(await labels()).toEqual(['twin_0']);
      expect((await read<DeviceView>(`/device/${first.id}`)).label).toBe('twin_0');
      expect(await templatePage()).toContain(t.id);

      await createDevices(svc.base, svc.token, { label: 'twin', templates: [t.id] });
      await eventually(async () => (await labels()).length === 2 || undefined, 'the new device on the other instance');
      expect(
        (await http('PUT', `${svc.base}/device/${first.id}`, { token: svc.token, body: { label: 'twin-renamed', templates: [t.id] } }))
          .status,
      ).toBe(200);
      await eventually(
        async () => (await read<DeviceView>(`/device/${first.id}`)).label === 'twin-renamed' || undefined,
        'the new label on the other instance',
      );
      await eventually(async () => (await labels()).join() === ['twin-renamed', 'twin_0'].join() || undefined, 'the page in label order');
      expect((await http('DELETE', `${svc.base}/template/${t.id}`, { token: svc.token })).status).toBe(200);
      await eventually(async () => !(await templatePage()).includes(t.id) || undefined, 'the template page without the deleted template');
    } finally {
      await other.stop();
    }
  });

  it('the views cached at creation are the JSON the database gives (overrides, metadata, keys, verbose, count)', async () => {
    const keyed: TemplateBodyWithAttrs = {
      label: 'Keyed',
      attrs: [...thermometer.attrs, { label: 'key', type: 'static', value_type: 'psk' }],
    };
    const t = await createTemplate(svc.base, svc.token, keyed);
    const loc = await createTemplate(svc.base, svc.token, {
      label: 'Loc',
      attrs: [{ label: 'vendor', type: 'static', value_type: 'string', static_value: 'acme' }],
    });
    const serial = t.attrs.find((a) => a.label === 'serial')!;
    const overrides = [
      {
        id: serial.id,
        template_id: String(t.id),
        label: 'serial',
        static_value: 'SN-9',
        metadata: [{ id: serial.metadata![0]!.id, static_value: 'K' }],
      },
    ];
    const many = await createDevices(svc.base, svc.token, { label: 'born', templates: [t.id, loc.id], attrs: overrides }, '?count=25');
    const verbose = await http<DevicesCreated<DeviceView>>('POST', `${svc.base}/device?verbose=true`, {
      token: svc.token,
      body: { label: 'born-v', templates: [loc.id] },
    });
    expect(verbose.status).toBe(200);
    const ids = [...many.map((d) => d.id), verbose.body.devices[0]!.id];
    const cached = await Promise.all(ids.map(async (id) => (await http('GET', `${svc.base}/device/${id}`, { token: svc.token })).text));
    const plain = await startTestService({
      DATABASE_URL: svc.env.DATABASE_URL,
      PSK_ENCRYPTION_KEY: svc.env.PSK_ENCRYPTION_KEY,
      DEVICE_CACHE_SIZE: '0',
    });
    try {
      const other = await login(plain.base);
      for (const [i, id] of ids.entries()) expect(cached[i]).toBe((await http('GET', `${plain.base}/device/${id}`, { token: other })).text);
    } finally {
      await plain.stop();
    }
    expect(JSON.parse(cached[3]!) as DeviceView).toMatchObject({ id: ids[3], label: 'born_3' });
    expect((JSON.parse(cached[3]!) as DeviceView).attrs[String(t.id)]![1]).toMatchObject({
      static_value: 'SN-9',
      is_static_overridden: true,
    });
    // Cached at creation indeed: a change behind the service's back (no event) does not show.
    const [late] = await createDevices(svc.base, svc.token, { label: 'late', templates: [loc.id] }, '?count=2');
    await svc.service.pool.query("UPDATE devices SET label = 'changed-behind' WHERE id = $1", [late.id]);
    expect((await http<DeviceView>('GET', `${svc.base}/device/${late.id}`, { token: svc.token })).body.label).toBe('late_0');
  });

  it('a page is the same JSON with the view cache off', async () => {
    const t = await createTemplate(svc.base, svc.token, thermometer);
    await createDevices(
      svc.base,
      svc.token,
      { label: 'nocache', templates: [t.id], attrs: [{ label: 'serial', static_value: 'SN-1' }] },
      '?count=2',
    );
    const cached = await page(`/device/template/${t.id}`);
    const plain = await startTestService({
      DATABASE_URL: svc.env.DATABASE_URL,
      PSK_ENCRYPTION_KEY: svc.env.PSK_ENCRYPTION_KEY,
      DEVICE_CACHE_SIZE: '0',
    });
    try {
      const other = await login(plain.base);
      const res = await http<DeviceList>('GET', `${plain.base}/device/template/${t.id}`, { token: other });
      expect(res.status).toBe(200);
      expect(res.body).toEqual(cached);
      expect(res.body.devices[0]!.attrs[String(t.id)]![1]).toMatchObject({ static_value: 'SN-1', is_static_overridden: true });
    } finally {
      await plain.stop();
    }
  });
});
