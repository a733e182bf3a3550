// Unit tests of the AES-256-GCM sealing of pre-shared keys.
import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { KeySealer } from '../../src/registry/psk/sealer.js';

const place = { tenant: 't', deviceId: 'abc123', attrId: 7 };

describe('KeySealer', () => {
  const sealer = new KeySealer(crypto.randomBytes(32));

  it('seals as nonce || ciphertext || tag and opens again', () => {
    const plain = crypto.randomBytes(16);
    const sealed = sealer.seal(plain, place);
    expect(sealed.length).toBe(12 + 16 + 16);
    expect(sealed.includes(plain)).toBe(false);
    expect(sealer.open(sealed, place).equals(plain)).toBe(true);
  });

  it('a fresh nonce every time', () => {
    const plain = Buffer.from('same');
    expect(sealer.seal(plain, place).equals(sealer.seal(plain, place))).toBe(false);
  });

  it('refuses another key, another row, or a changed byte', () => {
    const sealed = sealer.seal(Buffer.from('secret'), place);
    expect(() => new KeySealer(crypto.randomBytes(32)).open(sealed, place)).toThrow();
    expect(() => sealer.open(sealed, { ...place, attrId: 8 })).toThrow();
    expect(() => sealer.open(sealed, { ...place, deviceId: 'abc124' })).toThrow();
    const tampered = Buffer.from(sealed);
    tampered[14]! ^= 1;
    expect(() => sealer.open(tampered, place)).toThrow();
  });

  it('needs a 32-byte key', () => {
    expect(() => new KeySealer(Buffer.alloc(16))).toThrow(/32 bytes/);
  });
});
