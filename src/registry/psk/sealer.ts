// Pre-shared keys at rest: AES-256-GCM with a random 12-byte nonce per value, stored as
// nonce || ciphertext || tag. The row's identity (tenant, device, attribute) is the associated
// data, so a sealed value moved to another row no longer opens.
import crypto from 'node:crypto';

const NONCE = 12;
const TAG = 16;

export interface KeyPlace {
  tenant: string;
  deviceId: string;
  attrId: number;
}

const aad = (p: KeyPlace) => Buffer.from(JSON.stringify([p.tenant, p.deviceId, p.attrId]));

export class KeySealer {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error('the PSK encryption key must be 32 bytes');
  }

  seal(plain: Buffer, place: KeyPlace): Buffer {
    const nonce = crypto.randomBytes(NONCE);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.key, nonce);
    cipher.setAAD(aad(place));
    const body = Buffer.concat([cipher.update(plain), cipher.final()]);
    return Buffer.concat([nonce, body, cipher.getAuthTag()]);
  }

  /** Throws when the value was not sealed under this key for this place. */
  open(sealed: Buffer, place: KeyPlace): Buffer {
    const decipher = crypto.createDecipheriv('aes-256-gcm', this.key, sealed.subarray(0, NONCE));
    decipher.setAAD(aad(place));
    decipher.setAuthTag(sealed.subarray(sealed.length - TAG));
    return Buffer.concat([decipher.update(sealed.subarray(NONCE, sealed.length - TAG)), decipher.final()]);
  }
}
