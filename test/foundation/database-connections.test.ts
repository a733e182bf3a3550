// Sizing PostgreSQL's max_connections for several instances (docs/operations.md §7, "Service
// instances"): the docs give the connections one instance opens. Two instances on one database
// and one broker, both busy (API requests filling their pools, ingest through both): every
// connection they hold is of a kind the docs name, and the total stays within twice the docs'
// formula. Before (found by an audit), the docs left out the live fan-out's two connections
// (`device-registry-live-listen`, `device-registry-live-notify`, docs/live.md §4), so an operator
// sizing max_connections from them came two short per instance.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { deviceClient } from '../helpers/registry-fixtures.js';
import { http, login, tenantToken, testEnv, useSpawnedServices } from '../helpers/service.js';

const spawned = useSpawnedServices();
const POOL = 3;
const WORKERS = 2;

/** The Connections bullet of docs/operations.md §7. */
async function connectionsBullet(): Promise<string> {
  const text = await fs.readFile(path.join(projectRoot, 'docs/operations.md'), 'utf8');
  const section = text.slice(text.indexOf('### Service instances'), text.indexOf('### Load balancer'));
  const start = section.indexOf('- Connections:');
  expect(start, 'the Connections bullet of §7').toBeGreaterThanOrEqual(0);
  const end = section.indexOf('\n- ', start + 1);
  return section.slice(start, end < 0 ? undefined : end).replace(/\s+/g, ' ');
}

describe('database connections of two instances', () => {
  const admin = new pg.Pool({ connectionString: inject('adminDatabaseUrl'), max: 1 });
  afterAll(() => admin.end());

  it('are all of the kinds docs/operations.md names, and no more than its count', async () => {
    const env = await testEnv({
      PG_POOL_SIZE: String(POOL),
      INGEST_WORKERS: String(WORKERS),
      MQTT_SUBSCRIBER_CONNECTIONS: '2',
      JWT_SECRET: crypto.randomBytes(24).toString('hex'),
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
    });
    const a = await spawned.ready(env);
    const b = await spawned.ready({ ...env, DATA_DIR: (await testEnv()).DATA_DIR });
    const database = new URL(env.DATABASE_URL!).pathname.slice(1);
    const tenant = `conn${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(a.base, await login(a.base), tenant);
    const t = await createTemplate(a.base, token, { label: 'counter', attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] });
    const ids = (await createDevices(a.base, token, { label: 'c', templates: [t.id] }, '?count=40')).map((x) => x.id);

    // Sampled all along: the largest number held at once, and every application name seen.
    let peak = 0;
    const names = new Set<string>();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await admin.query<{ name: string; n: number }>(
          "SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' GROUP BY 1",
          [database],
        );
        peak = Math.max(
          peak,
          rows.reduce((s, r) => s + r.n, 0),
        );
        for (const r of rows) names.add(r.name);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();

    // Busy: each instance's pool asked for more than it holds; ingest through both instances.
    const device = await deviceClient(env.MQTT_URL!);
    const publishing = (async () => {
      for (let round = 0; round < 10; round++)
        await Promise.all(
          ids.map((id, i) => device.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: round * 100 + i }), { qos: 1 })),
        );
    })();
    for (let round = 0; round < 5; round++)
      await Promise.all(
        [a.base, b.base].flatMap((base) =>
          ids.map((id) => http('GET', `${base}/history/device/${id}/history?lastN=3`, { token }).then((r) => expect(r.status).toBe(200))),
        ),
      );
    await publishing;
    await device.endAsync();
    await new Promise((r) => setTimeout(r, 500));
    sampling = false;
    await sampler;

    const bullet = await connectionsBullet();
    // Every named connection is named there (the pools' and the workers' carry no name).
    for (const name of names) if (name !== '') expect(bullet, `docs/operations.md §7 names ${name}`).toContain(`\`${name}\``);
    // And the count it gives for an instance with an external broker holds for two.
    const formula = '`PG_POOL_SIZE` + 2 × `INGEST_WORKERS` + 5';
    expect(bullet).toContain(formula);
    expect(peak, `${peak} held at once`).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(2 * (POOL + 2 * WORKERS + 5));
  }, 180_000);
});
