import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { KeySealer } from '../../src/registry/psk/sealer.js';
import type { DeviceView } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { getDevice } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { TS } from '../devices/fixtures.js';
import { attrOf, copyPsk, genPsk, keyedDevices } from './fixtures.js';

const svc = useService();

const internalKey = async (id: string, label: string) =>
  attrOf((await http<DeviceView>('GET', `${svc.internal}/internal/device/${id}`, { token: svc.token })).body, label)?.static_value;

describe('PUT /device/{id}/attrs/{label}/psk', () => {
  it('copies the source key: 204, no body; the destination gets an updated time', async () => {
    const {
      ids: [src, dst],
    } = await keyedDevices(svc.base, svc.token, 2);
    const key = (await genPsk(svc.base, svc.token, src!, '?key_length=16&attrs=key')).body[0]!.psk;
    const res = await copyPsk(svc.base, svc.token, dst!, 'spare', `?from_dev_id=${src}&from_attr_label=key`);
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect(await internalKey(dst!, 'spare')).toBe(key);
    expect((await getDevice(svc.base, svc.token, dst!)).updated).toMatch(TS);
  });

  it('keeps no link: regenerating the source later leaves the copy as it was', async () => {
    const {
      ids: [src, dst],
    } = await keyedDevices(svc.base, svc.token, 2);
    const key = (await genPsk(svc.base, svc.token, src!, '?key_length=16&attrs=key')).body[0]!.psk;
    await copyPsk(svc.base, svc.token, dst!, 'key', `?from_dev_id=${src}&from_attr_label=key`);
    const newer = (await genPsk(svc.base, svc.token, src!, '?key_length=16&attrs=key')).body[0]!.psk;
    expect(await internalKey(src!, 'key')).toBe(newer);
    expect(await internalKey(dst!, 'key')).toBe(key);
  });

  it('within one device, from one attribute to another', async () => {
    const {
      ids: [id],
    } = await keyedDevices(svc.base, svc.token);
    const key = (await genPsk(svc.base, svc.token, id!, '?key_length=4&attrs=key')).body[0]!.psk;
    expect((await copyPsk(svc.base, svc.token, id!, 'spare', `?from_dev_id=${id}&from_attr_label=key`)).status).toBe(204);
    expect(await internalKey(id!, 'spare')).toBe(key);
  });

  it('a source key sealed under another PSK_ENCRYPTION_KEY is no key: 400 as the internal view shows none, not 500', async () => {
    const {
      ids: [src, dst],
    } = await keyedDevices(svc.base, svc.token, 2);
    await genPsk(svc.base, svc.token, src!, '?key_length=16&attrs=key');
    // What a changed PSK_ENCRYPTION_KEY leaves behind: the row sealed for this place, under another key.
    const { rows } = await svc.service.pool.query<{ attr_id: string }>('SELECT attr_id FROM device_psks WHERE device_id = $1', [src]);
    const place = { tenant: 'admin', deviceId: src!, attrId: Number(rows[0]!.attr_id) };
    const foreign = new KeySealer(crypto.randomBytes(32)).seal(crypto.randomBytes(16), place);
    await svc.service.pool.query('UPDATE device_psks SET sealed = $2 WHERE device_id = $1', [src, foreign]);
    expect(await internalKey(src!, 'key')).toBeUndefined();
    const res = await copyPsk(svc.base, svc.token, dst!, 'spare', `?from_dev_id=${src}&from_attr_label=key`);
    expect({ status: res.status, body: res.body }).toEqual({
      status: 400,
      body: { message: 'There is not a psk generated to key', status: 400 },
    });
    expect(await internalKey(dst!, 'spare')).toBeUndefined();
    expect(await getDevice(svc.base, svc.token, dst!)).not.toHaveProperty('updated');
  });

  describe('errors, in the order of decisions.md', () => {
    // SRC has a key on `key`; NOKEY has none; DST is the destination.
    const cases: Array<[string, string, string, string, number, unknown]> = [
      [
        'no source parameters',
        'DST',
        'spare',
        '',
        400,
        { message: 'Missing mandatory parameter: from_dev_id or/and from_attr_label', status: 400 },
      ],
      [
        'no from_attr_label',
        'DST',
        'spare',
        '?from_dev_id=SRC',
        400,
        { message: 'Missing mandatory parameter: from_dev_id or/and from_attr_label', status: 400 },
      ],
      [
        'no from_dev_id, unknown destination',
        'ffffff',
        'spare',
        '?from_attr_label=key',
        400,
        { message: 'Missing mandatory parameter: from_dev_id or/and from_attr_label', status: 400 },
      ],
      [
        'unknown source device',
        'ffffff',
        'nope',
        '?from_dev_id=eeeeee&from_attr_label=key',
        404,
        { message: 'No such device: eeeeee', status: 404 },
      ],
      [
        'unknown source attribute',
        'ffffff',
        'spare',
        '?from_dev_id=SRC&from_attr_label=nope',
        404,
        { message: 'Not found attributes nope', status: 404 },
      ],
      [
        'source attribute not psk',
        'ffffff',
        'spare',
        '?from_dev_id=SRC&from_attr_label=serial',
        400,
        { message: "Attribute serial is not a 'psk' type_value", status: 400 },
      ],
      [
        'unknown destination device',
        'ffffff',
        'spare',
        '?from_dev_id=SRC&from_attr_label=key',
        404,
        { message: 'No such device: ffffff', status: 404 },
      ],
      [
        'unknown destination attribute',
        'DST',
        'nope',
        '?from_dev_id=NOKEY&from_attr_label=key',
        404,
        { message: 'Not found attributes nope', status: 404 },
      ],
      [
        'destination attribute not psk',
        'DST',
        'temperature',
        '?from_dev_id=NOKEY&from_attr_label=key',
        400,
        { message: "Attribute temperature is not a 'psk' type_value", status: 400 },
      ],
      [
        'no key at the source',
        'DST',
        'spare',
        '?from_dev_id=NOKEY&from_attr_label=key',
        400,
        { message: 'There is not a psk generated to key', status: 400 },
      ],
    ];
    it.each(cases)('%s', async (_name, target, label, query, status, expected) => {
      const {
        ids: [src, nokey, dst],
      } = await keyedDevices(svc.base, svc.token, 3);
      await genPsk(svc.base, svc.token, src!, '?key_length=16&attrs=key');
      const swap = (s: string) => s.replace('SRC', src!).replace('NOKEY', nokey!).replace('DST', dst!);
      const res = await copyPsk(svc.base, svc.token, swap(target), label, swap(query));
      expect(res.status).toBe(status);
      expect(res.body).toEqual(expected);
      expect(await countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM device_psks WHERE device_id = ANY($1)', [[nokey, dst]])).toBe(
        0,
      );
      expect(await getDevice(svc.base, svc.token, dst!)).not.toHaveProperty('updated');
    });
  });
});
