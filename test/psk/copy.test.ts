import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, login, startTestService, type TestService } from '../helpers/service.js';
import { getDevice, TS } from '../devices/fixtures.js';
import { attrOf, copyPsk, genPsk, keyedDevices } from './fixtures.js';

let svc: TestService;
let token: string;

beforeAll(async () => {
  svc = await startTestService();
  token = await login(svc.base);
});
afterAll(() => svc?.stop());

const internalKey = async (id: string, label: string) => attrOf((await http('GET', `${svc.internal}/internal/device/${id}`, { token })).body, label)?.static_value;

describe('PUT /device/{id}/attrs/{label}/psk', () => {
  it('copies the source key: 204, no body; the destination gets an updated time', async () => {
    const { ids: [src, dst] } = await keyedDevices(svc.base, token, 2);
    const key = (await genPsk(svc.base, token, src!, '?key_length=16&attrs=key')).body[0].psk;
    const res = await copyPsk(svc.base, token, dst!, 'spare', `?from_dev_id=${src}&from_attr_label=key`);
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect(await internalKey(dst!, 'spare')).toBe(key);
    expect((await getDevice(svc.base, token, dst!)).updated).toMatch(TS);
  });

  it('keeps no link: regenerating the source later leaves the copy as it was', async () => {
    const { ids: [src, dst] } = await keyedDevices(svc.base, token, 2);
    const key = (await genPsk(svc.base, token, src!, '?key_length=16&attrs=key')).body[0].psk;
    await copyPsk(svc.base, token, dst!, 'key', `?from_dev_id=${src}&from_attr_label=key`);
    const newer = (await genPsk(svc.base, token, src!, '?key_length=16&attrs=key')).body[0].psk;
    expect(await internalKey(src!, 'key')).toBe(newer);
    expect(await internalKey(dst!, 'key')).toBe(key);
  });

  it('within one device, from one attribute to another', async () => {
    const { ids: [id] } = await keyedDevices(svc.base, token);
    const key = (await genPsk(svc.base, token, id!, '?key_length=4&attrs=key')).body[0].psk;
    expect((await copyPsk(svc.base, token, id!, 'spare', `?from_dev_id=${id}&from_attr_label=key`)).status).toBe(204);
    expect(await internalKey(id!, 'spare')).toBe(key);
  });

  describe('errors, in the order of decisions.md', () => {
    // SRC has a key on `key`; NOKEY has none; DST is the destination.
    const cases: Array<[string, string, string, string, number, unknown]> = [
      ['no source parameters', 'DST', 'spare', '', 400, { message: 'Missing mandatory parameter: from_dev_id or/and from_attr_label', status: 400 }],
      ['no from_attr_label', 'DST', 'spare', '?from_dev_id=SRC', 400, { message: 'Missing mandatory parameter: from_dev_id or/and from_attr_label', status: 400 }],
      ['no from_dev_id, unknown destination', 'ffffff', 'spare', '?from_attr_label=key', 400, { message: 'Missing mandatory parameter: from_dev_id or/and from_attr_label', status: 400 }],
      ['unknown source device', 'ffffff', 'nope', '?from_dev_id=eeeeee&from_attr_label=key', 404, { message: 'No such device: eeeeee', status: 404 }],
      ['unknown source attribute', 'ffffff', 'spare', '?from_dev_id=SRC&from_attr_label=nope', 404, { message: 'Not found attributes nope', status: 404 }],
      ['source attribute not psk', 'ffffff', 'spare', '?from_dev_id=SRC&from_attr_label=serial', 400, { message: "Attribute serial is not a 'psk' type_value", status: 400 }],
      ['unknown destination device', 'ffffff', 'spare', '?from_dev_id=SRC&from_attr_label=key', 404, { message: 'No such device: ffffff', status: 404 }],
      ['unknown destination attribute', 'DST', 'nope', '?from_dev_id=NOKEY&from_attr_label=key', 404, { message: 'Not found attributes nope', status: 404 }],
      ['destination attribute not psk', 'DST', 'temperature', '?from_dev_id=NOKEY&from_attr_label=key', 400, { message: "Attribute temperature is not a 'psk' type_value", status: 400 }],
      ['no key at the source', 'DST', 'spare', '?from_dev_id=NOKEY&from_attr_label=key', 400, { message: 'There is not a psk generated to key', status: 400 }],
    ];
    it.each(cases)('%s', async (_name, target, label, query, status, expected) => {
      const { ids: [src, nokey, dst] } = await keyedDevices(svc.base, token, 3);
      await genPsk(svc.base, token, src!, '?key_length=16&attrs=key');
      const swap = (s: string) => s.replace('SRC', src!).replace('NOKEY', nokey!).replace('DST', dst!);
      const res = await copyPsk(svc.base, token, swap(target), label, swap(query));
      expect(res.status).toBe(status);
      expect(res.body).toEqual(expected);
      const keys = await svc.service.pool.query('SELECT count(*)::int AS n FROM device_psks WHERE device_id = ANY($1)', [[nokey, dst]]);
      expect(keys.rows[0].n).toBe(0);
      expect(await getDevice(svc.base, token, dst!)).not.toHaveProperty('updated');
    });
  });
});
