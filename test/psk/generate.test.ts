import net from 'node:net';
import { describe, expect, it } from 'vitest';
import type { DeviceList, DeviceView } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { stringMatching } from '../helpers/matchers.js';
import { createDevices, createTemplate, getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { TS } from '../devices/fixtures.js';
import { attrOf, genPsk, keyedDevices } from './fixtures.js';

const svc = useService();

const internalView = async (id: string) =>
  (await http<DeviceView>('GET', `${svc.internal}/internal/device/${id}`, { token: svc.token })).body;

describe('POST /device/gen_psk/{id}', () => {
  it('without attrs: a key for every psk attribute, key_length random bytes as lowercase hex', async () => {
    const {
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const res = await genPsk(svc.base, svc.token, id!, '?key_length=16');
    expect(res.status).toBe(200);
    expect(res.body).toEqual([
      { attribute: 'key', psk: stringMatching(/^[0-9a-f]{32}$/) },
      { attribute: 'spare', psk: stringMatching(/^[0-9a-f]{32}$/) },
    ]);
    expect(res.body[0]!.psk).not.toBe(res.body[1]!.psk);
  });

  it('attrs=<labels>: only those; the key shows in the internal view as static_value, never in the public one', async () => {
    const {
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const res = await genPsk(svc.base, svc.token, id!, '?key_length=8&attrs=spare');
    expect(res.body).toEqual([{ attribute: 'spare', psk: stringMatching(/^[0-9a-f]{16}$/) }]);
    const internal = await internalView(id!);
    expect(attrOf(internal, 'spare')).toMatchObject({ static_value: res.body[0]!.psk, is_static_overridden: true });
    expect(attrOf(internal, 'key')).not.toHaveProperty('static_value');
    const listed = (await http<DeviceList>('GET', `${svc.internal}/internal/device?idsOnly=false&label=k_0`, { token: svc.token })).body
      .devices;
    expect(JSON.stringify(listed)).toContain(res.body[0]!.psk);
    const pub = await getDevice(svc.base, svc.token, id!);
    expect(JSON.stringify(pub)).not.toContain(res.body[0]!.psk);
    expect(attrOf(pub, 'spare')).not.toHaveProperty('static_value');
    const publicList = await http('GET', `${svc.base}/device`, { token: svc.token });
    expect(publicList.text).not.toContain(res.body[0]!.psk);
  });

  it('attrs repeated: every value counts, as a comma-separated list does', async () => {
    const {
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const res = await genPsk(svc.base, svc.token, id!, '?key_length=4&attrs=key&attrs=spare');
    expect(res.body.map((k: { attribute: string }) => k.attribute).sort()).toEqual(['key', 'spare']);
  });

  it("a static_value given to a psk attribute in its template is never shown as the device's key", async () => {
    const t = await createTemplate(svc.base, svc.token, {
      label: 'placeholder',
      attrs: [{ label: 'key', type: 'static', value_type: 'psk', static_value: 'deadbeef' }],
    });
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'p', templates: [t.id] });
    expect(attrOf(await getDevice(svc.base, svc.token, id), 'key')).not.toHaveProperty('static_value');
    expect(attrOf(await internalView(id), 'key')).not.toHaveProperty('static_value');
    const key = (await genPsk(svc.base, svc.token, id, '?key_length=4')).body[0]!.psk;
    expect(attrOf(await getDevice(svc.base, svc.token, id), 'key')).not.toHaveProperty('static_value');
    expect(attrOf(await internalView(id), 'key')).toMatchObject({ static_value: key, is_static_overridden: true });
  });

  it('generating again replaces the old key; the device gets an updated time', async () => {
    const {
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    expect(await getDevice(svc.base, svc.token, id!)).not.toHaveProperty('updated');
    const first = (await genPsk(svc.base, svc.token, id!, '?key_length=16&attrs=key')).body[0]!.psk;
    const afterFirst = await getDevice(svc.base, svc.token, id!);
    expect(afterFirst.updated).toMatch(TS);
    const second = (await genPsk(svc.base, svc.token, id!, '?key_length=16&attrs=key')).body[0]!.psk;
    expect(second).not.toBe(first);
    expect(attrOf(await internalView(id!), 'key')!.static_value).toBe(second);
    expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_psks WHERE device_id = $1', [id])).toBe(1);
  });

  it.each([1, 1023])('key_length %i is accepted', async (n) => {
    const {
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const res = await genPsk(svc.base, svc.token, id!, `?key_length=${n}&attrs=key`);
    expect(res.status).toBe(200);
    expect(res.body[0]!.psk).toHaveLength(2 * n);
  });

  it('a device without psk attributes and no attrs: 204 with no body', async () => {
    const t = await createTemplate(svc.base, svc.token, { label: 'plain', attrs: [{ label: 'x', type: 'dynamic', value_type: 'float' }] });
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'p', templates: [t.id] });
    const res = await genPsk(svc.base, svc.token, id, '?key_length=16');
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect(await getDevice(svc.base, svc.token, id)).not.toHaveProperty('updated');
  });

  it('the 204 carries no Content-Length and the connection stays usable for the next request', async () => {
    const t = await createTemplate(svc.base, svc.token, { label: 'plain', attrs: [{ label: 'x', type: 'dynamic', value_type: 'float' }] });
    const [{ id }] = await createDevices(svc.base, svc.token, { label: 'p', templates: [t.id] });
    const url = new URL(svc.base);
    // Two requests on one keep-alive connection, read raw: a client library would hide the header.
    const raw = await new Promise<string>((resolve, reject) => {
      let text = '';
      const sock = net.connect(Number(url.port), url.hostname, () => {
        sock.write(`POST /device/gen_psk/${id}?key_length=16 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${svc.token}\r\n\r\n`);
      });
      sock.setEncoding('latin1');
      sock.on('data', (chunk: string) => {
        const first = text === '' || !text.includes('HTTP/1.1 200');
        text += chunk;
        if (first && text.includes('\r\n\r\n') && !text.includes('/health')) {
          text += '/health sent\n';
          sock.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
        }
        if (text.includes('{"status":"ok"}')) {
          sock.end();
          resolve(text);
        }
      });
      sock.on('error', reject);
      sock.on('close', () => resolve(text));
    });
    const [first, second] = raw.split('/health sent\n');
    expect(first).toMatch(/^HTTP\/1.1 204 No Content\r\n/);
    expect(first!.toLowerCase()).not.toContain('content-length');
    expect(second).toMatch(/^HTTP\/1.1 200 OK\r\n[\s\S]*\{"status":"ok"\}$/);
  });

  describe('errors, in the order of decisions.md', () => {
    const cases: Array<[string, string, string, number, unknown]> = [
      ['key_length missing', 'DEVICE', '', 400, { message: 'Missing key_length parameter', status: 400 }],
      [
        'key_length missing, unknown device (key_length first)',
        'ffffff',
        '',
        400,
        { message: 'Missing key_length parameter', status: 400 },
      ],
      ['unknown device', 'ffffff', '?key_length=16', 404, { message: 'No such device: ffffff', status: 404 }],
      ['unknown device before a bad key_length', 'ffffff', '?key_length=0', 404, { message: 'No such device: ffffff', status: 404 }],
      ['key_length 0', 'DEVICE', '?key_length=0', 400, { message: 'key_length must be greater than 0 and lesser than 1024', status: 400 }],
      [
        'key_length 1024',
        'DEVICE',
        '?key_length=1024',
        400,
        { message: 'key_length must be greater than 0 and lesser than 1024', status: 400 },
      ],
      [
        'key_length -5',
        'DEVICE',
        '?key_length=-5',
        400,
        { message: 'key_length must be greater than 0 and lesser than 1024', status: 400 },
      ],
      [
        'key_length not an integer',
        'DEVICE',
        '?key_length=abc',
        400,
        { message: 'key_length must be greater than 0 and lesser than 1024', status: 400 },
      ],
      [
        'key_length 1.5',
        'DEVICE',
        '?key_length=1.5',
        400,
        { message: 'key_length must be greater than 0 and lesser than 1024', status: 400 },
      ],
      [
        'key_length empty',
        'DEVICE',
        '?key_length=',
        400,
        { message: 'key_length must be greater than 0 and lesser than 1024', status: 400 },
      ],
      [
        'bad key_length before unknown labels',
        'DEVICE',
        '?key_length=0&attrs=nope',
        400,
        { message: 'key_length must be greater than 0 and lesser than 1024', status: 400 },
      ],
      [
        'an unknown label',
        'DEVICE',
        '?key_length=16&attrs=key,nope',
        400,
        { message: 'Not found some attributes, please check them', status: 400 },
      ],
      [
        'a label that is not psk',
        'DEVICE',
        '?key_length=16&attrs=key,serial',
        400,
        { message: "Some attribute is not a 'psk' type_value", status: 400 },
      ],
      [
        'unknown labels before non-psk ones',
        'DEVICE',
        '?key_length=16&attrs=serial,nope',
        400,
        { message: 'Not found some attributes, please check them', status: 400 },
      ],
      [
        'an unknown label in a repeated attrs',
        'DEVICE',
        '?key_length=16&attrs=key&attrs=nope',
        400,
        { message: 'Not found some attributes, please check them', status: 400 },
      ],
    ];
    it.each(cases)('%s', async (_name, who, query, status, expected) => {
      const {
        ids: [id],
      } = await keyedDevices(svc.base, svc.token);
      const target = who === 'DEVICE' ? id! : who;
      const res = await genPsk(svc.base, svc.token, target, query);
      expect(res.status).toBe(status);
      expect(res.body).toEqual(expected);
      expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_psks WHERE device_id = $1', [id])).toBe(0);
    });
  });
});
