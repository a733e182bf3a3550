// A clean stop (SIGTERM's path) acknowledges every message it committed (docs/messaging.md §3:
// duplicates only where a process died). PUBACKs leave a subscriber connection in arrival order,
// so a committed message waits behind an older one not committed yet; when the stop's time runs
// out with such an older message still held (its shard stalled), the committed one was never
// acknowledged either, and the next instance stored it again. Found by an audit: one device's
// shard held by a lock on its registry read, another device's message committed meanwhile, the
// service stopped: that message stored twice by the next instance.
import path from 'node:path';
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { shardFor } from '../../src/ingest/shard.js';
import { deviceKey } from '../../src/topics.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { mosquittoBinary, startMosquitto, type Mosquitto } from '../helpers/mosquitto.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';

describe('a clean stop while one shard is stalled', () => {
  let broker: Mosquitto;
  let first: TestService | undefined;
  let second: TestService | undefined;
  let db: pg.Pool;

  beforeAll(async () => {
    if (!mosquittoBinary()) throw new Error('this test needs mosquitto installed (apt-get install mosquitto)');
    broker = await startMosquitto(path.join(projectRoot, 'test/ingest/fixtures/mosquitto.conf'));
  });
  afterAll(async () => {
    await first?.stop().catch(() => undefined);
    await second?.stop();
    await db?.end();
    await broker?.stop();
  });

  it('acknowledges what it committed: nothing is stored twice by the next instance', async () => {
    const settings = { MQTT_URL: broker.url, MQTT_SUBSCRIBER_CONNECTIONS: '1', INGEST_WORKERS: '2', SHUTDOWN_TIMEOUT_MS: '2000' };
    first = await startTestService(settings);
    const { DATABASE_URL, MQTT_CLIENT_ID, MQTT_SHARE_GROUP, PSK_ENCRYPTION_KEY } = first.env;
    const same = { DATABASE_URL, MQTT_CLIENT_ID, MQTT_SHARE_GROUP, PSK_ENCRYPTION_KEY };
    db = new pg.Pool({ connectionString: first.env.DATABASE_URL, max: 3 });
    const tenant = `sc${crypto.randomBytes(3).toString('hex')}`;
    const t = await createTemplate(db, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    // Two devices of different shards (so of different workers).
    const ids: string[] = [];
    while (ids.length < 2) {
      const id = await createDevice(db, tenant, [t]);
      if (ids.length === 0 || shardFor(deviceKey(tenant, id), 2) !== shardFor(deviceKey(tenant, ids[0]!), 2)) ids.push(id);
    }
    const [slow, fast] = ids as [string, string];
    const c = await deviceClient(broker.url, { protocolVersion: 5 });
    const lock = new pg.Client({ connectionString: first.env.DATABASE_URL });
    await lock.connect();
    try {
      // The fast device's model is cached; the slow one's is not, and its read will wait.
      await c.publishAsync(`${tenant}:${fast}/attrs`, JSON.stringify({ seq: 0 }), { qos: 1 });
      await eventually(async () => (await historyCount(db, tenant, fast)) === 1, 'the first message');
      await lock.query('BEGIN');
      await lock.query('LOCK TABLE device_overrides IN ACCESS EXCLUSIVE MODE');
      // On the one subscriber connection: the slow device's message first, then the fast one's.
      await c.publishAsync(`${tenant}:${slow}/attrs`, JSON.stringify({ seq: 1 }), { qos: 1 });
      await c.publishAsync(`${tenant}:${fast}/attrs`, JSON.stringify({ seq: 2 }), { qos: 1 });
      await eventually(async () => (await historyCount(db, tenant, fast)) === 2, 'the fast device’s second message committed');
      await first.stop();
      first = undefined;
    } finally {
      await lock.query('ROLLBACK').catch(() => undefined);
      await lock.end();
    }
    // The next instance (same database, same client ids) resumes the sessions.
    second = await startTestService({ ...settings, ...same });
    await c.endAsync();
    await eventually(async () => (await historyCount(db, tenant, slow)) >= 1, 'the slow device’s message stored by the next instance');
    await new Promise((r) => setTimeout(r, 1500));
    const { rows } = await db.query<{ value: string; n: number }>(
      'SELECT value, count(*)::int AS n FROM history WHERE tenant = $1 GROUP BY value ORDER BY value',
      [tenant],
    );
    expect(rows).toEqual([
      { value: '0', n: 1 },
      { value: '1', n: 1 },
      { value: '2', n: 1 },
    ]);
  }, 60_000);
});
