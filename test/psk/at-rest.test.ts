// Keys at rest: AES-256-GCM under PSK_ENCRYPTION_KEY, or a key generated into DATA_DIR with the
// embedded database; DATABASE_URL without a key refuses to start.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { KeySealer } from '../../src/registry/psk/sealer.js';
import type { DeviceView } from '../helpers/api.js';
import { freshDatabase, http, login, startFailure, tempDir, useService, useSpawnedServices, zeroSetupEnv } from '../helpers/service.js';
import { attrOf, genPsk, keyedDevices } from './fixtures.js';

const svc = useService();
const spawned = useSpawnedServices();

describe('keys at rest', () => {
  it('the table holds nonce || ciphertext || tag, never the key; it opens only with the configured key', async () => {
    const token = svc.token;
    const {
      ids: [id],
    } = await keyedDevices(svc.base, token);
    const keys = (await genPsk(svc.base, token, id!, '?key_length=16')).body;
    const { rows } = await svc.service.pool.query<{ sealed: Buffer; attr_id: string }>(
      'SELECT sealed, attr_id FROM device_psks WHERE device_id = $1',
      [id],
    );
    expect(rows).toHaveLength(2);
    const dump = (
      await svc.service.pool.query<{ t: string }>(
        "SELECT string_agg(encode(sealed, 'hex') || encode(sealed, 'escape'), '') AS t FROM device_psks",
      )
    ).rows[0]!.t;
    for (const { psk } of keys) {
      expect(dump).not.toContain(psk);
      for (const r of rows) expect(r.sealed.includes(Buffer.from(psk, 'hex'))).toBe(false);
    }
    for (const r of rows) expect(r.sealed.length).toBe(12 + 16 + 16);
    // Two keys never share a nonce.
    expect(rows[0]!.sealed.subarray(0, 12).equals(rows[1]!.sealed.subarray(0, 12))).toBe(false);
    // The configured key opens them; another does not.
    const place = { tenant: 'admin', deviceId: id!, attrId: Number(rows[0]!.attr_id) };
    const opened = new KeySealer(Buffer.from(svc.env.PSK_ENCRYPTION_KEY!, 'hex')).open(rows[0]!.sealed, place).toString('hex');
    expect(keys.map((k) => k.psk)).toContain(opened);
    expect(() => new KeySealer(crypto.randomBytes(32)).open(rows[0]!.sealed, place)).toThrow();
  });

  it('with DATABASE_URL and no PSK_ENCRYPTION_KEY the start fails with a clear message', async () => {
    const s = spawned.spawn({
      DATA_DIR: await tempDir(),
      PORT: '0',
      INTERNAL_PORT: '0',
      MQTT_PORT: '0',
      DATABASE_URL: await freshDatabase(),
      ADMIN_PASSWORD: 'x',
    });
    expect(await s.exited).toBe(2);
    expect(startFailure(s)).toBe(
      'configuration error: PSK_ENCRYPTION_KEY must be set when DATABASE_URL is set (32 bytes, as 64 hex characters or base64)',
    );
  });

  it('with the embedded database and no key, one is generated into DATA_DIR and reused after a restart', async () => {
    const env = await zeroSetupEnv();
    const dataDir = env.DATA_DIR!;
    const start = () => spawned.ready(env, 90_000);
    const first = await start();
    const file = path.join(dataDir, 'psk-key');
    expect((await fs.readFile(file, 'utf8')).trim()).toMatch(/^[0-9a-f]{64}$/);
    expect((await fs.stat(file)).mode & 0o777).toBe(0o600);
    let token = await login(first.base);
    const {
      ids: [id],
    } = await keyedDevices(first.base, token);
    const psk = (await genPsk(first.base, token, id!, '?key_length=16&attrs=key')).body[0]!.psk;
    first.svc.child.kill('SIGTERM');
    expect(await first.svc.exited).toBe(0);

    const second = await start();
    token = await login(second.base);
    const view = (await http<DeviceView>('GET', `${second.internal}/internal/device/${id}`, { token })).body;
    expect(attrOf(view, 'key')!.static_value).toBe(psk);
    second.svc.child.kill('SIGTERM');
    expect(await second.svc.exited).toBe(0);
  }, 180_000);
});
