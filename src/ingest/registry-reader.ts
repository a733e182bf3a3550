// The shard workers' read of the registry: the attributes of many devices in one query
// (the attributes of each device's templates without a parent, static values overridden by
// the device), waiting through database outages. Devices that do not exist are absent from
// the result.
import type pg from 'pg';
import { deviceKey } from '../topics.js';
import { buildDeviceModel, SchemaPool, type AttrRow, type DeviceModel } from './device-model.js';
import type { DatabaseRetry } from './db-retry.js';
import type { Logger } from '../log.js';

const SQL = `
SELECT d.tenant, d.id, dt.template_id::float8 AS template_id, a.id::float8 AS attr_id, a.label, a.type, a.value_type,
       COALESCE(o.static_value, a.static_value) AS static_value
  FROM unnest($1::text[], $2::text[]) AS k(tenant, id)
  JOIN devices d ON d.tenant = k.tenant AND d.id = k.id
  LEFT JOIN device_templates dt ON dt.tenant = d.tenant AND dt.device_id = d.id
  LEFT JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id AND a.parent_id IS NULL
  LEFT JOIN device_overrides o ON o.tenant = d.tenant AND o.device_id = d.id AND o.attr_id = a.id
 ORDER BY d.tenant, d.id, a.id`;

interface Row extends AttrRow {
  tenant: string;
  id: string;
}

export class RegistryReader {
  constructor(
    private readonly pool: pg.Pool,
    private readonly retry: DatabaseRetry,
    private readonly log: Logger,
    /** Devices of the same templates share one schema object (memory: see device-model.ts). */
    private readonly schemas?: SchemaPool,
  ) {}

  /** The models of those of `devices` that exist; retried until the database answers. */
  load(devices: Array<{ tenant: string; id: string }>): Promise<Map<string, DeviceModel>> {
    return this.retry.run('load device attributes', () => loadDeviceModels(this.pool, devices, this.log, this.schemas));
  }
}

async function loadDeviceModels(
  pool: pg.Pool,
  devices: Array<{ tenant: string; id: string }>,
  log: Logger,
  schemas?: SchemaPool,
): Promise<Map<string, DeviceModel>> {
  const { rows } = await pool.query<Row>({
    name: 'ingest-load-devices',
    text: SQL,
    values: [devices.map((d) => d.tenant), devices.map((d) => d.id)],
  });
  const byDevice = new Map<string, Row[]>();
  for (const r of rows) {
    const key = deviceKey(r.tenant, r.id);
    let list = byDevice.get(key);
    if (!list) byDevice.set(key, (list = []));
    list.push(r);
  }
  const models = new Map<string, DeviceModel>();
  for (const [key, list] of byDevice) {
    const { tenant, id } = list[0]!;
    models.set(
      key,
      buildDeviceModel(
        tenant,
        id,
        list,
        (label, reason) => log.warn('translator ignored', { tenant, device: id, attr: label, reason }),
        schemas,
      ),
    );
  }
  return models;
}
