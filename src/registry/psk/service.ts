// Pre-shared key rules (decisions.md "Pre-shared keys"): generation and copy, checked in the
// contract's order. Keys are sealed before they reach the database and are never logged or put
// into events; the only places a key leaves this module are the gen_psk answer and the
// internal device views (through `open`).
import crypto from 'node:crypto';
import type pg from 'pg';
import { ApiError, errors } from '../../errors.js';
import type { RegistryEvents } from '../events.js';
import { requireDevice } from '../sql.js';
import * as repo from './repo.js';
import type { KeyPlace, KeySealer } from './sealer.js';

export interface GeneratedKey {
  attribute: string;
  psk: string;
}

const PSK = 'psk';

export class PskService {
  constructor(
    private readonly events: RegistryEvents,
    private readonly sealer: KeySealer,
  ) {}

  /** A sealed key as the text the internal views show (lowercase hex). */
  open(sealed: Buffer, place: KeyPlace): string {
    return this.sealer.open(sealed, place).toString('hex');
  }

  /**
   * POST /device/gen_psk/{id}. `keyLength`: the validated length (1..1023 bytes), or the error of
   * an invalid one, answered after the device lookup as the contract orders. `labels` undefined:
   * every psk attribute of the device. An empty result means the device has no psk attribute (204).
   */
  async generate(tenant: string, deviceId: string, keyLength: number | ApiError, labels: string[] | undefined): Promise<GeneratedKey[]> {
    return this.events.change(async (c, announce) => {
      await requireDevice(c, tenant, deviceId, true);
      if (keyLength instanceof ApiError) throw keyLength;
      await repo.lockTemplatesOfDevice(c, tenant, deviceId);
      const n = keyLength;
      const attrs = await repo.deviceAttrs(c, tenant, deviceId);
      let targets = attrs.filter((a) => a.valueType === PSK);
      if (labels !== undefined) {
        const chosen = labels.map((l) => attrs.find((a) => a.label === l));
        if (chosen.some((a) => a === undefined)) throw errors.pskUnknownAttrs();
        if (chosen.some((a) => a!.valueType !== PSK)) throw errors.pskNotPskAttr();
        targets = [...new Set(chosen as repo.DeviceAttr[])];
      }
      if (targets.length === 0) return [];
      const keys = targets.map((a) => ({ attr: a, plain: crypto.randomBytes(n) }));
      await repo.storeKeys(
        c,
        tenant,
        deviceId,
        keys.map((k) => ({ attrId: k.attr.id, sealed: this.sealer.seal(k.plain, { tenant, deviceId, attrId: k.attr.id }) })),
      );
      await announce({ type: 'devices.changed', tenant, deviceIds: [deviceId] });
      return keys.map((k) => ({ attribute: k.attr.label, psk: k.plain.toString('hex') }));
    });
  }

  /** PUT /device/{id}/attrs/{label}/psk: copies the source's key; no link is kept. The query schema (`psk.copy`) has checked that both source parameters are there. */
  async copy(tenant: string, deviceId: string, label: string, fromDevice: string, fromLabel: string): Promise<void> {
    await this.events.change(async (c, announce) => {
      const source = await this.pskAttr(c, tenant, fromDevice, fromLabel, false);
      const target = await this.pskAttr(c, tenant, deviceId, label, true);
      const sealed = await repo.sealedKey(c, tenant, fromDevice, source.id);
      let plain: Buffer | undefined;
      try {
        if (sealed) plain = this.sealer.open(sealed, { tenant, deviceId: fromDevice, attrId: source.id });
      } catch {
        // Sealed under another PSK_ENCRYPTION_KEY: no key, as the internal view shows it (before, a 500).
      }
      if (!plain) throw errors.copyNoSourceKey(fromLabel);
      const resealed = this.sealer.seal(plain, { tenant, deviceId, attrId: target.id });
      await repo.storeKeys(c, tenant, deviceId, [{ attrId: target.id, sealed: resealed }]);
      await announce({ type: 'devices.changed', tenant, deviceIds: [deviceId] });
    });
  }

  /** The device (404), then its attribute `label` (404), which must be a psk one (400). */
  private async pskAttr(c: pg.PoolClient, tenant: string, deviceId: string, label: string, lock: boolean): Promise<repo.DeviceAttr> {
    await requireDevice(c, tenant, deviceId, lock);
    // The destination's attribute must stay a psk one until the key is stored (as in generate).
    if (lock) await repo.lockTemplatesOfDevice(c, tenant, deviceId);
    const attr = (await repo.deviceAttrs(c, tenant, deviceId)).find((a) => a.label === label);
    if (!attr) throw errors.copyAttrNotFound(label);
    if (attr.valueType !== PSK) throw errors.copyAttrNotPsk(label);
    return attr;
  }
}
