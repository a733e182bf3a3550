// Keys follow their attributes: kept through a device update while the psk attribute stays,
// deleted with the attribute or when its value type stops being psk; never leaked.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceView } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { attrOf, genPsk, keyed, keyedDevices } from './fixtures.js';

const logged: string[] = [];
const write = process.stdout.write.bind(process.stdout);

// Registered before useService(): stdout is captured before the service starts, and given back
// (afterAll runs in reverse order) before it stops.
beforeAll(() => {
  // The in-process service logs to this process's stdout, at debug level here: keep every line.
  process.stdout.write = (chunk: string | Uint8Array, ...rest: unknown[]) => {
    logged.push(String(chunk));
    return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
  };
});
const svc = useService({ LOG_LEVEL: 'debug' });
afterAll(() => {
  process.stdout.write = write;
});

const keyCount = (id: string) => countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_psks WHERE device_id = $1', [id]);
const internalKey = async (id: string, label: string) =>
  attrOf((await http<DeviceView>('GET', `${svc.internal}/internal/device/${id}`, { token: svc.token })).body, label)?.static_value;

describe('keys and device/template changes', () => {
  it('a device update keeps the keys of psk attributes still present', async () => {
    const {
      template,
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const key = (await genPsk(svc.base, svc.token, id!, '?key_length=16&attrs=key')).body[0]!.psk;
    const other = await createTemplate(svc.base, svc.token, {
      label: 'other',
      attrs: [{ label: 'humidity', type: 'dynamic', value_type: 'float' }],
    });
    const res = await http('PUT', `${svc.base}/device/${id}`, {
      token: svc.token,
      body: { label: 'renamed', templates: [template.id, other.id] },
    });
    expect(res.status).toBe(200);
    expect(await internalKey(id!, 'key')).toBe(key);
  });

  it('the override list cannot set a key (create or update): 400, the stored key unchanged', async () => {
    const {
      template,
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const key = (await genPsk(svc.base, svc.token, id!, '?key_length=16&attrs=key')).body[0]!.psk;
    const body = { label: 'k', templates: [template.id], attrs: [{ label: 'key', static_value: 'deadbeef' }] };
    const expected = { message: 'The key of psk attribute key is set by gen_psk or a key copy, not by the override list', status: 400 };
    const put = await http('PUT', `${svc.base}/device/${id}`, { token: svc.token, body });
    expect([put.status, put.body]).toEqual([400, expected]);
    expect(await internalKey(id!, 'key')).toBe(key);
    const post = await http('POST', `${svc.base}/device`, { token: svc.token, body: { ...body, id: 'abcd' } });
    expect([post.status, post.body]).toEqual([400, expected]);
    expect((await http('GET', `${svc.base}/device/abcd`, { token: svc.token })).status).toBe(404);
  });

  it('the override list cannot set the value of a psk metadata attribute either (create or update): 400, nothing stored', async () => {
    // It was 200 "device updated", the value stored in clear and shown by no view, public or internal.
    const template = await createTemplate(svc.base, svc.token, {
      label: 'with-psk-metadata',
      attrs: [
        {
          label: 'serial',
          type: 'static',
          value_type: 'string',
          static_value: 'S1',
          metadata: [{ label: 'mkey', type: 'static', value_type: 'psk' }],
        },
      ],
    });
    const serial = template.attrs.find((a) => a.label === 'serial')!;
    const meta = serial.metadata![0]!;
    const body = {
      label: 'm',
      templates: [template.id],
      attrs: [{ id: serial.id, label: 'serial', metadata: [{ id: meta.id, static_value: 'topsecret' }] }],
    };
    const expected = {
      message: 'The value of psk metadata attribute mkey is a key: it cannot be set by the override list',
      status: 400,
    };
    const post = await http('POST', `${svc.base}/device`, { token: svc.token, body: { ...body, id: 'abce' } });
    expect([post.status, post.body]).toEqual([400, expected]);
    expect((await http('GET', `${svc.base}/device/abce`, { token: svc.token })).status).toBe(404);
    const created = await http<{ devices: { id: string }[] }>('POST', `${svc.base}/device`, {
      token: svc.token,
      body: { label: 'm', templates: [template.id] },
    });
    const id = created.body.devices[0]!.id;
    const put = await http('PUT', `${svc.base}/device/${id}`, { token: svc.token, body });
    expect([put.status, put.body]).toEqual([400, expected]);
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_overrides WHERE device_id = $1', [id])).toBe(0);
  });

  it('a device update dropping the template deletes its keys', async () => {
    const {
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    await genPsk(svc.base, svc.token, id!, '?key_length=16');
    await http('PUT', `${svc.base}/device/${id}`, { token: svc.token, body: { label: 'bare', templates: [] } });
    expect(await keyCount(id!)).toBe(0);
  });

  it('a template update removing the attribute, or changing its value type, deletes its keys; others stay', async () => {
    const {
      template,
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const keys = (await genPsk(svc.base, svc.token, id!, '?key_length=16')).body;
    expect(await keyCount(id!)).toBe(2);
    const body = structuredClone(keyed);
    body.attrs = body.attrs.filter((a) => a.label !== 'spare'); // removed
    const res = await http('PUT', `${svc.base}/template/${template.id}`, { token: svc.token, body });
    expect(res.status).toBe(200);
    expect(await keyCount(id!)).toBe(1);
    expect(await internalKey(id!, 'key')).toBe(keys[0]!.psk);
    body.attrs.find((a) => a.label === 'key')!.value_type = 'string'; // no longer psk
    body.attrs.find((a) => a.label === 'key')!.static_value = 'plain';
    await http('PUT', `${svc.base}/template/${template.id}`, { token: svc.token, body });
    expect(await keyCount(id!)).toBe(0);
    expect(await internalKey(id!, 'key')).toBe('plain');
  });

  it('a key never appears in public views, events, metrics or logs', async () => {
    const events: unknown[] = [];
    const off = svc.service.events.on((e) => events.push(e));
    const {
      template,
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const key = (await genPsk(svc.base, svc.token, id!, '?key_length=32&attrs=key')).body[0]!.psk;
    await http('PUT', `${svc.base}/device/${id}/attrs/spare/psk?from_dev_id=${id}&from_attr_label=key`, { token: svc.token });
    off();
    const pub = await getDevice(svc.base, svc.token, id!);
    const texts = [
      JSON.stringify(pub),
      (await http('GET', `${svc.base}/device?page_size=100`, { token: svc.token })).text,
      (await http('GET', `${svc.base}/device/template/${template.id}`, { token: svc.token })).text,
      (await http('PUT', `${svc.base}/device/${id}`, { token: svc.token, body: { label: 'x', templates: [template.id] } })).text,
      JSON.stringify(events),
      (await http('GET', `${svc.base}/metrics`)).text,
      (await http('DELETE', `${svc.base}/device/${id}`, { token: svc.token })).text,
      // a failing request is logged too
      (await http('POST', `${svc.base}/device/gen_psk/${id}?key_length=16`, { token: svc.token })).text,
      logged.join(''),
    ];
    expect(logged.length).toBeGreaterThan(0);
    for (const t of texts) {
      expect(t).not.toContain(key);
      expect(t).not.toContain(key.toUpperCase());
      expect(t).not.toContain(Buffer.from(key, 'hex').toString('base64'));
    }
    expect(events).toContainEqual({ type: 'devices.changed', tenant: 'admin', deviceIds: [id] });
  });
});

describe('gen_psk at the same time as a template update', () => {
  // Before (found by an audit): gen_psk did not lock the device's templates, so a PUT /template
  // committing between its read of the attributes and its write made it answer 500 (foreign key
  // violation: the attribute removed) or store a key for an attribute just made `string`, its
  // key just dropped; the key came back when the attribute became `psk` again.
  const K = (valueType: string) => ({ label: 'k', type: 'static', value_type: valueType, static_value: 's' });
  const internal = (id: string) => http<DeviceView>('GET', `${svc.internal}/internal/device/${id}`, { token: svc.token });

  it('an attribute removed meanwhile: 200 or 204, never 500', async () => {
    for (let round = 0; round < 10; round++) {
      const t = await createTemplate(svc.base, svc.token, { label: 'p', attrs: [K('psk')] });
      const made = await http<{ devices: Array<{ id: string }> }>('POST', `${svc.base}/device?count=10`, {
        token: svc.token,
        body: { label: 'p', templates: [t.id] },
      });
      const answers = await Promise.all([
        http('PUT', `${svc.base}/template/${t.id}`, { token: svc.token, body: { label: 'p', attrs: [] } }),
        ...made.body.devices.map((d) => genPsk(svc.base, svc.token, d.id, '?key_length=8')),
      ]);
      for (const a of answers) expect([a.status, a.body]).toEqual([expect.toBeOneOf([200, 204]), a.body]);
    }
  });

  it('an attribute made `string` meanwhile keeps no key: none comes back when it is `psk` again', async () => {
    for (let round = 0; round < 10; round++) {
      const t = await createTemplate(svc.base, svc.token, { label: 'p', attrs: [K('psk')] });
      const made = await http<{ devices: Array<{ id: string }> }>('POST', `${svc.base}/device?count=10`, {
        token: svc.token,
        body: { label: 'p', templates: [t.id] },
      });
      const ids = made.body.devices.map((d) => d.id);
      await Promise.all([
        http('PUT', `${svc.base}/template/${t.id}`, { token: svc.token, body: { label: 'p', attrs: [K('string')] } }),
        ...ids.map((id) => genPsk(svc.base, svc.token, id, '?key_length=8')),
      ]);
      expect(
        (await http('PUT', `${svc.base}/template/${t.id}`, { token: svc.token, body: { label: 'p', attrs: [K('psk')] } })).status,
      ).toBe(200);
      for (const id of ids) expect(attrOf((await internal(id)).body, 'k')!.static_value).toBeUndefined();
    }
  });
});
