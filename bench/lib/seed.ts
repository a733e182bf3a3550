// Bulk seeding for the benchmarks, straight into PostgreSQL (set-based SQL, seconds for 100k rows).
import type pg from 'pg';

/**
 * `n` templates in `tenant`, labelled `model-<8 hex>-<alpha|beta|gamma|delta>` (label order is
 * not id order), each with three attributes: temperature (dynamic float), vendor (static
 * string, one of 100 values) and fw (meta string).
 */
export async function seedTemplates(pool: pg.Pool, tenant: string, n: number): Promise<void> {
  await pool.query(
    `WITH t AS (
       INSERT INTO templates (tenant, label)
       SELECT $1, 'model-' || substr(md5(i::text), 1, 8) || '-' || (ARRAY['alpha','beta','gamma','delta'])[1 + i % 4]
       FROM generate_series(1, $2) i
       RETURNING id
     )
     INSERT INTO template_attrs (tenant, template_id, label, type, value_type, static_value)
     SELECT $1, t.id, a.label, a.type, a.value_type, CASE WHEN a.type = 'static' THEN 'vendor-' || (t.id % 100) END
     FROM t CROSS JOIN (VALUES ('temperature', 'dynamic', 'float'), ('vendor', 'static', 'string'), ('fw', 'meta', 'string')) a(label, type, value_type)
     ORDER BY t.id`,
    [tenant, n],
  );
  await pool.query('VACUUM ANALYZE templates');
  await pool.query('VACUUM ANALYZE template_attrs');
}

/** Ids of every template of `tenant`. */
export async function templateIds(pool: pg.Pool, tenant: string): Promise<number[]> {
  const { rows } = await pool.query<{ id: string }>('SELECT id FROM templates WHERE tenant = $1 ORDER BY id', [tenant]);
  return rows.map((r) => Number(r.id));
}
