// Actuation's read of the registry: does the device exist in the tenant, and which of its
// attributes are actuators (attributes of its templates without a parent).
import type pg from 'pg';

/** Labels of the device's `actuator` attributes, or undefined if there is no such device. */
export async function actuatorLabels(pool: pg.Pool, tenant: string, id: string): Promise<Set<string> | undefined> {
  if (id.includes('\0')) return undefined; // no id holds NUL (PostgreSQL text cannot)
  const { rows } = await pool.query<{ label: string | null; type: string | null }>({
    name: 'actuation-device-attrs',
    text: `SELECT a.label, a.type
             FROM devices d
             LEFT JOIN device_templates dt ON dt.tenant = d.tenant AND dt.device_id = d.id
             LEFT JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id AND a.parent_id IS NULL
            WHERE d.tenant = $1 AND d.id = $2`,
    values: [tenant, id],
  });
  if (rows.length === 0) return undefined;
  return new Set(rows.filter((r) => r.type === 'actuator' && r.label !== null).map((r) => r.label!));
}
