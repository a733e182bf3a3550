// Nothing acknowledged is lost: devices publish QoS 1 through Mosquitto without pause while the
// service is killed with SIGKILL (and later stopped with SIGTERM) and started again; every
// message whose PUBACK the device saw ends up in history (at least once). Messages stored twice
// are counted: reported after the SIGKILL (redelivery allowed), none after the SIGTERM.
// Mosquitto runs as the test's own process with test/ingest/fixtures/mosquitto.conf (nothing
// queued for an offline session is thrown away); without the mosquitto binary the test skips.
import crypto from 'node:crypto';
import path from 'node:path';
import type mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { spawnService, testEnv, type SpawnedService } from '../helpers/service.js';
import { mosquittoBinary, startMosquitto, type Mosquitto } from '../helpers/mosquitto.js';
import { createDevices, createTemplate, deviceClient, eventually, randomDeviceId } from '../helpers/registry-fixtures.js';

const hasMosquitto = mosquittoBinary() !== undefined;
const DEVICES = 24;
const WINDOW = 8;

/** Devices publishing `{seq: n}` continuously (a window of unacknowledged messages each). */
class Fleet {
  readonly acked = new Map<string, Set<number>>();
  private running = true;
  private loops: Array<Promise<void>> = [];
  private clients: mqtt.MqttClient[] = [];

  constructor(
    private readonly url: string,
    private readonly tenant: string,
    private readonly ids: string[],
    /** First sequence number (each test its own range). */
    private readonly base: number,
  ) {}

  async start(): Promise<void> {
    for (const id of this.ids) {
      const c = await deviceClient(this.url, { username: `${this.tenant}:${id}`, reconnectPeriod: 500 });
      this.clients.push(c);
      const acked = new Set<number>();
      this.acked.set(id, acked);
      let next = this.base;
      const topic = `${this.tenant}:${id}/attrs`;
      const lane = async () => {
        while (this.running) {
          const n = next++;
          await c.publishAsync(topic, JSON.stringify({ seq: n }), { qos: 1 }).then(
            () => acked.add(n),
            () => undefined,
          );
        }
      };
      for (let w = 0; w < WINDOW; w++) this.loops.push(lane());
    }
  }

  get total(): number {
    let n = 0;
    for (const s of this.acked.values()) n += s.size;
    return n;
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    await Promise.all(this.clients.map((c) => c.endAsync()));
  }
}

describe.skipIf(!hasMosquitto)('no acknowledged message is lost (Mosquitto)', () => {
  let broker: Mosquitto;
  let env: Record<string, string | undefined>;
  let db: pg.Pool;
  const tenant = `nl${crypto.randomBytes(3).toString('hex')}`;
  const ids = Array.from({ length: DEVICES }, () => randomDeviceId());
  const services: SpawnedService[] = [];

  beforeAll(async () => {
    broker = await startMosquitto(path.join(projectRoot, 'test/ingest/fixtures/mosquitto.conf'));
    env = await testEnv({
      MQTT_URL: broker.url,
      LOG_LEVEL: 'info',
      MQTT_SUBSCRIBER_CONNECTIONS: '4',
      INGEST_WORKERS: '2',
      MQTT_SESSION_EXPIRY_SECONDS: '600',
    });
    db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 2 });
    // The first start creates the schema; the devices are added before any message is sent.
    const first = await launch();
    const t = await createTemplate(db, tenant, 'counter', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    await createDevices(db, tenant, t, ids);
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
  });
  afterAll(async () => {
    for (const s of services) if (s.child.exitCode === null) s.child.kill('SIGKILL');
    await db?.end();
    await broker?.stop();
  });

  async function launch(): Promise<SpawnedService> {
    const s = spawnService(env);
    services.push(s);
    await s.waitFor(/"msg":"ready"/, 60_000);
    return s;
  }

  async function storedSeqs(): Promise<Map<string, Set<number>>> {
    const { rows } = await db.query<{ device_id: string; seq: number }>(
      'SELECT DISTINCT device_id, value::int AS seq FROM history WHERE tenant = $1',
      [tenant],
    );
    const out = new Map<string, Set<number>>();
    for (const r of rows) {
      let s = out.get(r.device_id);
      if (!s) out.set(r.device_id, (s = new Set()));
      s.add(r.seq);
    }
    return out;
  }

  async function expectAllStored(fleet: Fleet): Promise<void> {
    const missing = await eventually(
      async () => {
        const stored = await storedSeqs();
        let missingCount = 0;
        for (const [id, acked] of fleet.acked) {
          const have = stored.get(id) ?? new Set<number>();
          for (const n of acked) if (!have.has(n)) missingCount++;
        }
        return missingCount === 0 ? 0 : undefined;
      },
      'every acknowledged message in history',
      30_000,
    ).catch(async () => {
      const stored = await storedSeqs();
      const lost: string[] = [];
      for (const [id, acked] of fleet.acked) for (const n of acked) if (!stored.get(id)?.has(n)) lost.push(`${id}#${n}`);
      return lost.length;
    });
    expect(missing).toBe(0);
  }

  /** Rows stored more than once (a device's seq in history twice or more), seqs from `base` on. */
  async function storedTwice(base: number, end: number): Promise<{ rows: number; twice: number }> {
    const { rows } = await db.query<{ rows: number; distinct: number }>(
      `SELECT count(*)::int AS rows, count(DISTINCT (device_id, value))::int AS distinct FROM history
       WHERE tenant = $1 AND value::bigint >= $2 AND value::bigint < $3`,
      [tenant, base, end],
    );
    return { rows: rows[0]!.rows, twice: rows[0]!.rows - rows[0]!.distinct };
  }

  const until = async (cond: () => boolean, what: string) => eventually(() => cond() || undefined, what, 60_000);

  it('SIGKILL during sustained ingest, then a restart: every acknowledged message is stored', async () => {
    let service = await launch();
    const fleet = new Fleet(broker.url, tenant, ids, 0);
    await fleet.start();
    // Sustained ingest: values are being committed while more arrive.
    await until(() => fleet.total > 3000, 'ingest under way');
    await eventually(
      async () =>
        (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM history WHERE tenant = $1', [tenant])).rows[0]!.n > 1000 ||
        undefined,
      'commits under way',
    );
    service.child.kill('SIGKILL');
    await service.exited;
    const atKill = fleet.total;
    // Devices keep publishing while the service is gone: the broker keeps it for the sessions.
    await until(() => fleet.total > atKill + 2000, 'messages published while the service is down');
    service = await launch();
    const atRestart = fleet.total;
    await until(() => fleet.total > atRestart + 2000, 'ingest after the restart');
    await fleet.stop();
    await expectAllStored(fleet);
    // Redelivery is allowed after a SIGKILL (a commit whose PUBACK died with the process): counted
    // and reported (issue 19), not asserted.
    const { rows, twice } = await storedTwice(0, 1_000_000);
    console.log(`SIGKILL: ${fleet.total} acknowledged, ${rows} rows stored, ${twice} stored twice`);
    service.child.kill('SIGTERM');
    expect(await service.exited).toBe(0);
  }, 120_000);

  it('SIGTERM during sustained ingest flushes, commits and acknowledges before exiting', async () => {
    let service = await launch();
    const fleet = new Fleet(broker.url, tenant, ids, 1_000_000);
    await fleet.start();
    await until(() => fleet.total > 3000, 'ingest under way');
    service.child.kill('SIGTERM');
    expect(await service.exited).toBe(0);
    expect(service.output.some((l) => l.includes('some messages were not committed in time'))).toBe(false);
    const atStop = fleet.total;
    await until(() => fleet.total > atStop + 1000, 'messages published while the service is down');
    service = await launch();
    await fleet.stop();
    await expectAllStored(fleet);
    const { rows, twice } = await storedTwice(1_000_000, 2_000_000);
    console.log(`SIGTERM: ${fleet.total} acknowledged, ${rows} rows stored, ${twice} stored twice`);
    // No process died: every commit's PUBACK went out before the DISCONNECT, none is redelivered.
    expect(twice).toBe(0);
    service.child.kill('SIGTERM');
    expect(await service.exited).toBe(0);
  }, 120_000);
});
