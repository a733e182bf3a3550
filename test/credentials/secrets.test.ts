// A secret appears in the answer to its creation and nowhere else (docs/credentials.md): not in
// the database (a dump of it logs no device in), the logs, the registry events, the metrics or
// an error message. The service runs as a process of its own, logging everything (debug).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, loggedAddress, testEnv, useSpawnedServices, type SpawnedService } from '../helpers/service.js';
import { connackCode, deleteCredential, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

let proc: SpawnedService;
let base: string;
let mqttUrl: string;
let db: pg.Client;
let listener: pg.Client;
const notifications: string[] = [];
let t: Tenant;

const spawned = useSpawnedServices();
beforeAll(async () => {
  const env = await testEnv({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required', LOG_LEVEL: 'debug' });
  ({ svc: proc, base } = await spawned.ready(env));
  mqttUrl = loggedAddress(await proc.waitFor(/embedded MQTT broker listening/));
  db = new pg.Client({ connectionString: env.DATABASE_URL });
  await db.connect();
  listener = new pg.Client({ connectionString: env.DATABASE_URL });
  await listener.connect();
  listener.on('notification', (n) => notifications.push(n.payload ?? ''));
  await listener.query('LISTEN registry_events');
  t = await newTenant({ base });
});

// Stopped cleanly here (useSpawnedServices only kills what is still running after this).
afterAll(async () => {
  await listener?.end();
  await db?.end();
  proc?.child.kill('SIGTERM');
  await proc?.exited;
});

/** Every row of every table of the database, as text: what a dump would hold. */
async function dump(): Promise<string> {
  const { rows } = await db.query<{ name: string }>(
    "SELECT format('%I.%I', schemaname, tablename) AS name FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
  );
  let text = '';
  for (const { name } of rows)
    text += (await db.query<{ row: string }>(`SELECT t::text AS row FROM ${name} t`)).rows.map((r) => r.row).join('\n');
  return text;
}

describe('secrets', () => {
  it('appear only in the answer to their creation', async () => {
    const svc = { base };
    const d = await newDevice(svc, t);
    const generated = await newCredential(svc, t, d);
    const chosen = await newCredential(svc, t, d, { type: 'password', secret: 'my-chosen-secret-777' });
    const doomed = await newCredential(svc, t, d);
    const secrets = [generated.secret, chosen.secret, doomed.secret];
    // Logins, right and wrong, in both protocol versions; a deletion; error answers.
    expect(await connackCode(mqttUrl, { username: `${t.name}:${d}`, password: generated.secret })).toBe(0);
    expect(await connackCode(mqttUrl, { username: `${t.name}:${d}`, password: chosen.secret })).toBe(0);
    expect(await connackCode(mqttUrl, { username: `${t.name}:${d}`, password: doomed.secret + 'x', protocolVersion: 5 })).toBe(0x86);
    expect(await connackCode(mqttUrl, { username: `${t.name}:ffffff`, password: generated.secret })).toBe(4);
    expect((await deleteCredential(svc, t, d, doomed.id)).status).toBe(200);
    expect(await connackCode(mqttUrl, { username: `${t.name}:${d}`, password: doomed.secret })).toBe(4);
    const errorsSeen = [
      (
        await http('POST', `${base}/device/${d}/credentials`, {
          token: t.token,
          body: { type: 'password', secret: doomed.secret + ' spaced' },
        })
      ).text,
      (await http('POST', `${base}/device/ffffff/credentials`, { token: t.token, body: { type: 'password', secret: chosen.secret } })).text,
    ];
    const listed = (await http('GET', `${base}/device/${d}/credentials`, { token: t.token })).text;
    const metrics = (await http('GET', `${base}/metrics`)).text;
    const view = (await http('GET', `${base}/device/${d}`, { token: t.token })).text;
    // Let the last logins be recorded (last_used) and the logs flushed.
    await new Promise((r) => setTimeout(r, 2500));
    const database = await dump();
    const places = {
      logs: proc.output.join('\n'),
      events: notifications.join('\n'),
      metrics,
      database,
      errors: errorsSeen.join('\n'),
      listed,
      device: view,
    };
    expect(places.logs).toContain('device login refused');
    expect(places.events).toContain('credentials.changed');
    for (const secret of secrets) {
      for (const [where, text] of Object.entries(places)) expect(text.includes(secret), `${where} holds a secret`).toBe(false);
    }
  });

  it('a dump of the database logs no device in: a stored hash is no password', async () => {
    const svc = { base };
    const d = await newDevice(svc, t);
    await newCredential(svc, t, d);
    await newCredential(svc, t, d, { type: 'password', secret: 'another-chosen-secret' });
    const { rows } = await db.query<{ secret_hash: string }>(
      'SELECT secret_hash FROM device_credentials WHERE tenant = $1 AND device_id = $2',
      [t.name, d],
    );
    expect(rows.map((r) => r.secret_hash.split('$')[0]).sort()).toEqual(['hmac-sha256', 'scrypt']);
    for (const { secret_hash } of rows) {
      for (const attempt of [secret_hash, secret_hash.split('$').at(-1)!]) {
        expect(await connackCode(mqttUrl, { username: `${t.name}:${d}`, password: attempt })).toBe(4);
      }
    }
  });
});
