// Device credential SQL. Secrets never reach this module: only their stored hashes.
import type pg from 'pg';
import { registryTimeSql } from '../../time.js';

type Db = pg.Pool | pg.PoolClient;

/** A credential as the API shows it (times in the registry format). */
export interface CredentialRow {
  id: string;
  type: string;
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
}

/** What a login needs of one credential. */
export interface StoredCredential {
  id: string;
  secretHash: string;
  /** Milliseconds since the epoch; null: never expires. */
  expiresMs: number | null;
}

const VIEW = `id::text AS id, type, ${registryTimeSql('created')} AS created_at, ${registryTimeSql('expires')} AS expires_at, ${registryTimeSql('last_used')} AS last_used_at`;

export async function countOf(db: Db, tenant: string, deviceId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM device_credentials WHERE tenant = $1 AND device_id = $2', [
    tenant,
    deviceId,
  ]);
  return rows[0]!.n;
}

export async function insert(
  db: Db,
  row: { tenant: string; deviceId: string; id: string; type: string; secretHash: string; expires: string | null },
): Promise<CredentialRow> {
  const { rows } = await db.query<CredentialRow>(
    `INSERT INTO device_credentials (tenant, device_id, id, type, secret_hash, expires) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${VIEW}`,
    [row.tenant, row.deviceId, row.id, row.type, row.secretHash, row.expires],
  );
  return rows[0]!;
}

export async function list(db: Db, tenant: string, deviceId: string): Promise<CredentialRow[]> {
  const { rows } = await db.query<CredentialRow>(
    `SELECT ${VIEW} FROM device_credentials WHERE tenant = $1 AND device_id = $2 ORDER BY created, id`,
    [tenant, deviceId],
  );
  return rows;
}

/** Deletes one credential; undefined when the device has no such credential. */
export async function remove(
  db: Db,
  tenant: string,
  deviceId: string,
  id: string,
): Promise<(CredentialRow & { in_broker: boolean }) | undefined> {
  const { rows } = await db.query<CredentialRow & { in_broker: boolean }>(
    `DELETE FROM device_credentials WHERE tenant = $1 AND device_id = $2 AND id = $3 RETURNING ${VIEW}, in_broker`,
    [tenant, deviceId, id],
  );
  return rows[0];
}

/** The one credential of the device the external Mosquitto holds (dynamic-security.ts). */
export async function markInBroker(db: Db, tenant: string, deviceId: string, id: string | null): Promise<void> {
  await db.query('UPDATE device_credentials SET in_broker = (id IS NOT DISTINCT FROM $3::uuid) WHERE tenant = $1 AND device_id = $2', [
    tenant,
    deviceId,
    id,
  ]);
}

/** Each device of `keys` that exists, with its credentials (none: an empty list); absent devices are missing from the map. */
export async function loginRecords(db: Db, keys: Array<{ tenant: string; deviceId: string }>): Promise<Map<string, StoredCredential[]>> {
  const { rows } = await db.query<{
    tenant: string;
    device_id: string;
    id: string | null;
    secret_hash: string | null;
    expires_ms: number | null;
  }>(
    `SELECT d.tenant, d.id AS device_id, c.id::text AS id, c.secret_hash, (extract(epoch FROM c.expires) * 1000)::float8 AS expires_ms
     FROM unnest($1::text[], $2::text[]) AS k(tenant, id)
     JOIN devices d ON d.tenant = k.tenant AND d.id = k.id
     LEFT JOIN device_credentials c ON c.tenant = d.tenant AND c.device_id = d.id`,
    [keys.map((k) => k.tenant), keys.map((k) => k.deviceId)],
  );
  const out = new Map<string, StoredCredential[]>();
  for (const r of rows) {
    const key = recordKey(r.tenant, r.device_id);
    let list = out.get(key);
    if (!list) out.set(key, (list = []));
    if (r.id !== null) list.push({ id: r.id, secretHash: r.secret_hash!, expiresMs: r.expires_ms });
  }
  return out;
}

export const recordKey = (tenant: string, deviceId: string) => tenant + '/' + deviceId;

/** Records logins: each credential's last_used becomes now. */
export async function touch(db: Db, used: Array<{ tenant: string; deviceId: string; id: string }>): Promise<void> {
  await db.query(
    `UPDATE device_credentials c SET last_used = now()
     FROM unnest($1::text[], $2::text[], $3::uuid[]) AS u(tenant, device_id, id)
     WHERE c.tenant = u.tenant AND c.device_id = u.device_id AND c.id = u.id`,
    [used.map((u) => u.tenant), used.map((u) => u.deviceId), used.map((u) => u.id)],
  );
}

/** What the external Mosquitto should hold (dynamic-security.ts): each device with an unexpired credential, and whether that device's account was made. */
export async function brokerAccounts(db: Db): Promise<Array<{ tenant: string; device_id: string; in_broker: boolean }>> {
  const { rows } = await db.query<{ tenant: string; device_id: string; in_broker: boolean }>(
    `SELECT tenant, device_id, bool_or(in_broker) AS in_broker FROM device_credentials
     WHERE expires IS NULL OR expires > now() GROUP BY tenant, device_id`,
  );
  return rows;
}

/** Which of these devices exist (`<tenant>:<id>` names of broker accounts), as `<tenant>\n<id>` keys. */
export async function existingDevices(db: Db, devices: Array<{ tenant: string; deviceId: string }>): Promise<Set<string>> {
  if (devices.length === 0) return new Set();
  const { rows } = await db.query<{ tenant: string; id: string }>(
    `SELECT d.tenant, d.id FROM devices d JOIN unnest($1::text[], $2::text[]) AS k(tenant, id) ON d.tenant = k.tenant AND d.id = k.id`,
    [devices.map((d) => d.tenant), devices.map((d) => d.deviceId)],
  );
  return new Set(rows.map((r) => `${r.tenant}\n${r.id}`));
}

/** The broker's account of these devices is gone: no credential of theirs is in the broker any more. */
export async function clearInBroker(db: Db, devices: Array<{ tenant: string; deviceId: string }>): Promise<void> {
  if (devices.length === 0) return;
  await db.query(
    `UPDATE device_credentials c SET in_broker = false FROM unnest($1::text[], $2::text[]) AS k(tenant, device_id)
     WHERE c.tenant = k.tenant AND c.device_id = k.device_id AND c.in_broker`,
    [devices.map((d) => d.tenant), devices.map((d) => d.deviceId)],
  );
}

/** In how many ms (by the database's clock) the next broker-held credential expires; undefined: none will. */
export async function nextExpiryInBroker(db: Db): Promise<number | undefined> {
  const { rows } = await db.query<{ ms: number | null }>(
    'SELECT (extract(epoch FROM min(expires) - now()) * 1000)::float8 AS ms FROM device_credentials WHERE in_broker AND expires > now()',
  );
  const ms = rows[0]?.ms;
  return ms === null || ms === undefined ? undefined : Math.max(0, ms);
}

/**
 * Locks the device row as a credential's creation does, then says whether the device's
 * broker-held credential is still an expired one: a sweep decides under that lock, so it cannot
 * remove the account a rotation under way has just given a new secret.
 */
export async function lockIfExpiredInBroker(c: pg.PoolClient, tenant: string, deviceId: string): Promise<boolean> {
  const found = await c.query('SELECT 1 FROM devices WHERE tenant = $1 AND id = $2 FOR UPDATE', [tenant, deviceId]);
  if (found.rowCount !== 1) return false;
  const { rowCount } = await c.query(
    'SELECT 1 FROM device_credentials WHERE tenant = $1 AND device_id = $2 AND in_broker AND expires <= now()',
    [tenant, deviceId],
  );
  return rowCount !== null && rowCount > 0;
}

/** Devices whose broker-held credential has expired. */
export async function expiredInBroker(db: Db): Promise<Array<{ tenant: string; device_id: string }>> {
  const { rows } = await db.query<{ tenant: string; device_id: string }>(
    'SELECT tenant, device_id FROM device_credentials WHERE in_broker AND expires <= now()',
  );
  return rows;
}
