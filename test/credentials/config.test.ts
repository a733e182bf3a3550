// The credential settings (docs/credentials.md, docs/operations.md): MQTT_DEVICE_AUTH and its
// defaults, the embedded broker's TLS listener, the credential key.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, readConfig } from '../../src/config.js';
import { CredentialHasher } from '../../src/registry/credentials/hashing.js';
import { tempDir } from '../helpers/service.js';

const PSK = 'a'.repeat(64);
const DB = { DATABASE_URL: 'postgres://x@localhost/db', PSK_ENCRYPTION_KEY: PSK };

describe('MQTT_DEVICE_AUTH', () => {
  it('defaults to required with DATABASE_URL and to optional with the embedded database', () => {
    expect(readConfig(DB).mqttDeviceAuth).toBe('required');
    expect(readConfig({}).mqttDeviceAuth).toBe('optional');
    for (const mode of ['required', 'optional', 'off'] as const) {
      expect(readConfig({ ...DB, MQTT_DEVICE_AUTH: mode }).mqttDeviceAuth).toBe(mode);
      expect(readConfig({ MQTT_DEVICE_AUTH: mode.toUpperCase() }).mqttDeviceAuth).toBe(mode);
    }
    expect(() => readConfig({ MQTT_DEVICE_AUTH: 'maybe' })).toThrow('MQTT_DEVICE_AUTH must be one of required, optional, off, got "maybe"');
  });

  it('MAX_DEVICE_CREDENTIALS defaults to 10', () => {
    expect(readConfig({}).maxDeviceCredentials).toBe(10);
    expect(() => readConfig({ MAX_DEVICE_CREDENTIALS: '0' })).toThrow(/MAX_DEVICE_CREDENTIALS must be an integer between 1 and 1000/);
  });
});

describe('the TLS listener', () => {
  it('needs a readable certificate and key together; MQTT_PLAIN=false and MQTT_TLS_CA need them', async () => {
    const dir = await tempDir();
    const cert = path.join(dir, 'cert.pem');
    const key = path.join(dir, 'key.pem');
    await fs.writeFile(cert, 'x');
    await fs.writeFile(key, 'x');
    const c = readConfig({ MQTT_TLS_CERT: cert, MQTT_TLS_KEY: key, MQTT_PLAIN: 'false' });
    expect(c).toMatchObject({ mqttTlsCert: cert, mqttTlsKey: key, mqttTlsPort: 8883, mqttPlain: false, mqttTlsCa: undefined });
    expect(readConfig({}).mqttPlain).toBe(true);
    const cases: Array<[Record<string, string>, string]> = [
      [{ MQTT_TLS_CERT: cert }, 'MQTT_TLS_KEY must be set together with MQTT_TLS_CERT'],
      [{ MQTT_TLS_KEY: key }, 'MQTT_TLS_CERT must be set together with MQTT_TLS_KEY'],
      [
        { MQTT_TLS_CERT: path.join(dir, 'missing.pem'), MQTT_TLS_KEY: key },
        `MQTT_TLS_CERT must name a readable file, got "${path.join(dir, 'missing.pem')}"`,
      ],
      [{ MQTT_PLAIN: 'false' }, 'MQTT_PLAIN can be false only with MQTT_TLS_CERT and MQTT_TLS_KEY (the broker needs a listener)'],
      [{ MQTT_PLAIN: 'sometimes' }, 'MQTT_PLAIN must be true or false, got "sometimes"'],
      [{ MQTT_TLS_CA: cert }, 'MQTT_TLS_CA needs MQTT_TLS_CERT and MQTT_TLS_KEY (client certificates are checked on the TLS listener)'],
      [{ MQTT_DYNAMIC_SECURITY: 'true' }, 'MQTT_DYNAMIC_SECURITY needs MQTT_URL (the Mosquitto whose device accounts it keeps)'],
      // With an external broker they would be ignored: refused, as a setting that does nothing.
      [
        { MQTT_URL: 'mqtt://127.0.0.1:1883', MQTT_TLS_CERT: cert, MQTT_TLS_KEY: key },
        "MQTT_TLS_CERT configures the embedded broker's listeners; with MQTT_URL set, configure TLS on that broker",
      ],
      [
        { MQTT_URL: 'mqtt://127.0.0.1:1883', MQTT_PLAIN: 'false' },
        "MQTT_PLAIN configures the embedded broker's listeners; with MQTT_URL set, configure TLS on that broker",
      ],
    ];
    for (const [env, message] of cases) {
      expect(() => readConfig(env)).toThrow(ConfigError);
      expect(() => readConfig(env)).toThrow(message);
    }
  });
});

describe('the credential key', () => {
  it('DEVICE_CREDENTIAL_KEY, else one derived from the PSK key: each gives other hashes', () => {
    expect(readConfig({ DEVICE_CREDENTIAL_KEY: 'b'.repeat(64) }).deviceCredentialKey).toEqual(Buffer.alloc(32, 0xbb));
    expect(() => readConfig({ DEVICE_CREDENTIAL_KEY: 'short' })).toThrow(
      'DEVICE_CREDENTIAL_KEY must be 32 bytes, as 64 hex characters or base64',
    );
    const place = { tenant: 't', deviceId: 'abc', credentialId: crypto.randomUUID() };
    const psk = Buffer.from(PSK, 'hex');
    const derived = CredentialHasher.derivedFrom(psk).keyed(place, 'secret');
    expect(derived).toBe(CredentialHasher.derivedFrom(psk).keyed(place, 'secret'));
    // Not the PSK key itself, and bound to the row.
    expect(derived).not.toBe(new CredentialHasher(psk).keyed(place, 'secret'));
    expect(derived).not.toBe(CredentialHasher.derivedFrom(psk).keyed({ ...place, deviceId: 'abd' }, 'secret'));
  });
});
