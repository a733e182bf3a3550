// Once per `npm test`: a PostgreSQL server and an MQTT broker for the whole run. By default
// both are embedded (nothing needs to run on the machine); TEST_DATABASE_URL / TEST_MQTT_URL
// point the run at running ones instead. Each test file then gets its own fresh database
// (test/helpers/service.ts), so runs and files never see each other's rows.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { Aedes } from 'aedes';
import { startEmbeddedDatabase } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    mqttUrl: string;
    runId: string;
    embeddedBroker: boolean;
  }
}

export default async function setup(project: TestProject) {
  const log = createLogger('warn', { component: 'test-setup' });
  const runId = crypto.randomBytes(4).toString('hex');
  const stops: Array<() => Promise<void>> = [];

  let adminDatabaseUrl = process.env.TEST_DATABASE_URL;
  let tmp: string | undefined;
  if (!adminDatabaseUrl) {
    tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'dr-test-pg-'));
    await fs.chmod(tmp, 0o755);
    const db = await startEmbeddedDatabase({ dataDir: tmp, port: undefined, log });
    adminDatabaseUrl = db.url;
    stops.push(() => db.stop());
  }

  let mqttUrl = process.env.TEST_MQTT_URL;
  if (!mqttUrl) {
    const broker = await Aedes.createBroker();
    const server = net.createServer(broker.handle);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    mqttUrl = `mqtt://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
    stops.push(() => new Promise<void>((resolve) => broker.close(() => server.close(() => resolve()))));
  }

  project.provide('adminDatabaseUrl', adminDatabaseUrl);
  project.provide('mqttUrl', mqttUrl);
  project.provide('runId', runId);
  project.provide('embeddedBroker', !process.env.TEST_MQTT_URL);

  return async () => {
    // Drop the databases this run created (their services are stopped by now).
    const client = new pg.Client({ connectionString: adminDatabaseUrl });
    await client.connect();
    const { rows } = await client.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE $1`, [
      `dr_test_${runId}_%`,
    ]);
    for (const { datname } of rows) {
      await client.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [datname]);
      await client.query(`DROP DATABASE IF EXISTS "${datname}"`);
    }
    await client.end();
    for (const stop of stops.reverse()) await stop();
    if (tmp) await fs.rm(tmp, { recursive: true, force: true });
  };
}
