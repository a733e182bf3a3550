// Pre-shared key SQL: a device's attributes, and its sealed keys in device_psks.
import type pg from 'pg';

type Db = pg.Pool | pg.PoolClient;

export interface DeviceAttr {
  id: number;
  label: string;
  valueType: string;
}

/**
 * Locks the templates of a device (locked itself, so its template list holds) FOR SHARE, in id
 * order as device creation locks them: a template update (FOR UPDATE) then waits for the key
 * written, or the key write for the update. Before, found by an audit: gen_psk racing a PUT
 * /template that removed the psk attribute answered 500 (foreign key violation), and one that
 * made it `string` dropped the device's key before gen_psk stored a new one for it, which came
 * back when the attribute became `psk` again.
 */
export async function lockTemplatesOfDevice(db: Db, tenant: string, deviceId: string): Promise<void> {
  await db.query(
    `SELECT 1 FROM templates t
      WHERE t.tenant = $1 AND t.id IN (SELECT dt.template_id FROM device_templates dt WHERE dt.tenant = $1 AND dt.device_id = $2)
      ORDER BY t.id FOR SHARE`,
    [tenant, deviceId],
  );
}

/** The top-level attributes of a device's templates, in id order. */
export async function deviceAttrs(db: Db, tenant: string, deviceId: string): Promise<DeviceAttr[]> {
  const { rows } = await db.query<DeviceAttr>(
    `SELECT a.id, a.label, a.value_type AS "valueType" FROM device_templates dt
     JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id AND a.parent_id IS NULL
     WHERE dt.tenant = $1 AND dt.device_id = $2 ORDER BY a.id`,
    [tenant, deviceId],
  );
  return rows;
}

export async function sealedKey(db: Db, tenant: string, deviceId: string, attrId: number): Promise<Buffer | undefined> {
  const { rows } = await db.query<{ sealed: Buffer }>(
    'SELECT sealed FROM device_psks WHERE tenant = $1 AND device_id = $2 AND attr_id = $3',
    [tenant, deviceId, attrId],
  );
  return rows[0]?.sealed;
}

/** Stores (or replaces) keys of one device and marks the device updated. */
export async function storeKeys(db: Db, tenant: string, deviceId: string, keys: Array<{ attrId: number; sealed: Buffer }>): Promise<void> {
  await db.query(
    `INSERT INTO device_psks (tenant, device_id, attr_id, sealed)
     SELECT $1, $2, k.attr_id, k.sealed FROM unnest($3::bigint[], $4::bytea[]) AS k(attr_id, sealed)
     ON CONFLICT (tenant, device_id, attr_id) DO UPDATE SET sealed = excluded.sealed, created = now()`,
    [tenant, deviceId, keys.map((k) => k.attrId), keys.map((k) => k.sealed)],
  );
  await db.query('UPDATE devices SET updated = now() WHERE tenant = $1 AND id = $2', [tenant, deviceId]);
}
