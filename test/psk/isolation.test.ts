// Pre-shared keys across tenants (interface.md §4.3, §7; decisions.md "Pre-shared keys"): a
// device of another tenant is an unknown device for gen_psk and for both ends of a key copy,
// and tenant A's keys are the same before and after tenant B tried (A's internal view).
import { beforeAll, describe, expect, it } from 'vitest';
import type { DeviceView, TemplateView } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { attrOf, copyPsk, genPsk, keyed } from './fixtures.js';

const svc = useService();
let tokenA: string;
let tokenB: string;
let tenantB: string;
let templateA: TemplateView;
let templateB: TemplateView;

beforeAll(async () => {
  tokenA = (await svc.freshTenant('pska')).token;
  ({ tenant: tenantB, token: tokenB } = await svc.freshTenant('pskb'));
  templateA = await createTemplate(svc.base, tokenA, keyed);
  templateB = await createTemplate(svc.base, tokenB, keyed);
});

/** A device of tenant A whose two psk attributes have keys; returns its id and the keys. */
async function keyedDeviceOfA(): Promise<{ id: string; keys: Record<string, string> }> {
  const id = (await createDevices(svc.base, tokenA, { label: 'a', templates: [templateA.id] }))[0].id;
  const res = await genPsk(svc.base, tokenA, id, '?key_length=16');
  expect(res.status).toBe(200);
  const keys = Object.fromEntries(res.body.map((k) => [k.attribute, k.psk]));
  expect(Object.keys(keys).sort()).toEqual(['key', 'spare']);
  return { id, keys };
}

async function deviceOfB(): Promise<string> {
  const id = (await createDevices(svc.base, tokenB, { label: 'b', templates: [templateB.id] }))[0].id;
  return id;
}

/** What tenant A's internal listener shows for the device: the keys, and the device's updated time. */
async function internalOfA(id: string): Promise<{ key: unknown; spare: unknown; updated: unknown }> {
  const res = await http<DeviceView>('GET', `${svc.internal}/internal/device/${id}`, { token: tokenA });
  expect(res.status, res.text).toBe(200);
  return { key: attrOf(res.body, 'key')?.static_value, spare: attrOf(res.body, 'spare')?.static_value, updated: res.body.updated };
}

async function internalOfB(id: string): Promise<DeviceView> {
  const res = await http<DeviceView>('GET', `${svc.internal}/internal/device/${id}`, { token: tokenB });
  expect(res.status, res.text).toBe(200);
  return res.body;
}

const noSuchDevice = (id: string) => ({ message: `No such device: ${id}`, status: 404 });

describe("tenant B and tenant A's keys", () => {
  it("gen_psk on A's device: 404 No such device, with or without attrs; A's keys unchanged", async () => {
    const a = await keyedDeviceOfA();
    const before = await internalOfA(a.id);
    expect(before).toMatchObject({ key: a.keys.key, spare: a.keys.spare });
    for (const query of ['?key_length=16', '?key_length=16&attrs=key', '?key_length=32&attrs=key,spare']) {
      const res = await genPsk(svc.base, tokenB, a.id, query);
      expect(res.status, query).toBe(404);
      expect(res.body, query).toEqual(noSuchDevice(a.id));
      expect(res.text, query).not.toContain(a.keys.key);
    }
    expect(await internalOfA(a.id)).toEqual(before);
  });

  it("gen_psk on A's device with a bad key_length: the device check comes first, B still sees 404", async () => {
    const a = await keyedDeviceOfA();
    const before = await internalOfA(a.id);
    // decisions.md: key_length present, then the device (404), then key_length's range.
    const res = await genPsk(svc.base, tokenB, a.id, '?key_length=5000');
    expect(res.status).toBe(404);
    expect(res.body).toEqual(noSuchDevice(a.id));
    expect(await internalOfA(a.id)).toEqual(before);
  });

  it("copying a key from A's device into B's own device: 404 for the source device, B's device gets no key", async () => {
    const a = await keyedDeviceOfA();
    const b = await deviceOfB();
    const res = await copyPsk(svc.base, tokenB, b, 'key', `?from_dev_id=${a.id}&from_attr_label=key`);
    expect(res.status).toBe(404);
    expect(res.body).toEqual(noSuchDevice(a.id));
    expect(res.text).not.toContain(a.keys.key);
    const viewB = await internalOfB(b);
    expect(attrOf(viewB, 'key')).not.toHaveProperty('static_value');
    expect(attrOf(viewB, 'spare')).not.toHaveProperty('static_value');
    expect(JSON.stringify(viewB)).not.toContain(a.keys.key);
    expect(await getDevice(svc.base, tokenB, b)).not.toHaveProperty('updated');
    expect(
      await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_psks WHERE tenant = $1 AND device_id = $2', [tenantB, b]),
    ).toBe(0);
  });

  it("copying B's own key into A's device: 404 for the destination device; A's keys unchanged", async () => {
    const a = await keyedDeviceOfA();
    const b = await deviceOfB();
    const keyB = (await genPsk(svc.base, tokenB, b, '?key_length=16&attrs=key')).body[0]!.psk;
    const before = await internalOfA(a.id);
    for (const label of ['key', 'spare']) {
      const res = await copyPsk(svc.base, tokenB, a.id, label, `?from_dev_id=${b}&from_attr_label=key`);
      expect(res.status, label).toBe(404);
      expect(res.body, label).toEqual(noSuchDevice(a.id));
    }
    const after = await internalOfA(a.id);
    expect(after).toEqual(before);
    expect([after.key, after.spare]).not.toContain(keyB);
    // B's own key stays where it was.
    expect(attrOf(await internalOfB(b), 'key')!.static_value).toBe(keyB);
  });

  it("a copy between two of A's devices, asked by B: 404 for the source; neither of A's devices changes", async () => {
    const src = await keyedDeviceOfA();
    const dst = (await createDevices(svc.base, tokenA, { label: 'a', templates: [templateA.id] }))[0].id;
    const res = await copyPsk(svc.base, tokenB, dst, 'key', `?from_dev_id=${src.id}&from_attr_label=key`);
    expect(res.status).toBe(404);
    expect(res.body).toEqual(noSuchDevice(src.id));
    expect(await internalOfA(dst)).toEqual({ key: undefined, spare: undefined, updated: undefined });
    expect(await internalOfA(src.id)).toMatchObject({ key: src.keys.key, spare: src.keys.spare });
  });

  it("A's internal view is not B's: B's internal listener answers 404 for A's device", async () => {
    const a = await keyedDeviceOfA();
    const res = await http<DeviceView>('GET', `${svc.internal}/internal/device/${a.id}`, { token: tokenB });
    expect(res.status).toBe(404);
    expect(res.body).toEqual(noSuchDevice(a.id));
    const list = await http('GET', `${svc.internal}/internal/device?page_size=1000`, { token: tokenB });
    expect(list.status).toBe(200);
    expect(list.text).not.toContain(a.keys.key);
    expect(list.text).not.toContain(a.keys.spare);
  });
});

describe('the same device id in both tenants', () => {
  it("B's gen_psk and copy act on B's device of that id only; A's keys stay as they were", async () => {
    const a = await keyedDeviceOfA();
    // B creates a device with the very id of A's device (client-chosen ids are per tenant).
    const made = await createDevices(svc.base, tokenB, { id: a.id, label: 'twin', templates: [templateB.id] });
    expect(made).toEqual([{ id: a.id, label: 'twin_0' }]);
    const before = await internalOfA(a.id);

    const gen = await genPsk(svc.base, tokenB, a.id, '?key_length=16&attrs=key');
    expect(gen.status).toBe(200);
    const keyB = gen.body[0]!.psk;
    expect(keyB).not.toBe(a.keys.key);
    // Within B: from the twin's `key` to its `spare`.
    const copy = await copyPsk(svc.base, tokenB, a.id, 'spare', `?from_dev_id=${a.id}&from_attr_label=key`);
    expect(copy.status).toBe(204);

    const twin = await internalOfB(a.id);
    expect(attrOf(twin, 'key')!.static_value).toBe(keyB);
    expect(attrOf(twin, 'spare')!.static_value).toBe(keyB);
    expect(await internalOfA(a.id)).toEqual(before);
    expect(before).toMatchObject({ key: a.keys.key, spare: a.keys.spare });
  });
});
