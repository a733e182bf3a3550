// Several service instances on one broker (issue 19, point 10), with Mosquitto as the test's own
// process (test/ingest/fixtures/mosquitto.conf: nothing queued for a session is thrown away)
// and one database: instances started with the same settings get their own client ids (leased
// slots) in one share group; an instance stopped cleanly while another runs ends its sessions;
// one killed with SIGKILL and never started again has its sessions drained by the survivor.
// Devices publish `{seq: n}` (QoS 1) all along; every message the broker acknowledged to its
// device must end up in history, and, where no process died, exactly once.
import crypto from 'node:crypto';
import path from 'node:path';
import type mqtt from 'mqtt';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { loggedAddress, spawnService, testEnv, type SpawnedService } from '../helpers/service.js';
import { mosquittoBinary, startMosquitto, type Mosquitto } from '../helpers/mosquitto.js';
import { createDevices, createTemplate, deviceClient, eventually, metric, randomDeviceId } from '../helpers/registry-fixtures.js';
import { takeDatabaseAway } from '../helpers/faults.js';

const hasMosquitto = mosquittoBinary() !== undefined;
if (!hasMosquitto) {
  // Where the broker is expected (CI, or a run against a broker), its absence is a failure.
  if (process.env.CI || process.env.TEST_MQTT_URL) throw new Error('test/ingest/instances.test.ts needs the mosquitto binary');
  console.warn('SKIPPED test/ingest/instances.test.ts: the mosquitto binary is not installed');
}

const DEVICES = 16;
const LANES = 2;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Devices publishing `{seq: n}` with QoS 1 until stopped; `acked` holds what the broker acknowledged. */
class Fleet {
  readonly acked = new Map<string, Set<number>>();
  private running = true;
  private readonly loops: Array<Promise<void>> = [];
  private readonly clients: mqtt.MqttClient[] = [];

  constructor(
    private readonly url: string,
    private readonly tenant: string,
    private readonly ids: string[],
  ) {}

  async start(): Promise<void> {
    for (const id of this.ids) {
      const c = await deviceClient(this.url, { username: `${this.tenant}:${id}`, reconnectPeriod: 500 });
      this.clients.push(c);
      const acked = new Set<number>();
      this.acked.set(id, acked);
      let next = 0;
      const lane = async () => {
        while (this.running) {
          const n = next++;
          await c.publishAsync(`${this.tenant}:${id}/attrs`, JSON.stringify({ seq: n }), { qos: 1 }).then(
            () => acked.add(n),
            () => undefined,
          );
          await sleep(2);
        }
      };
      for (let w = 0; w < LANES; w++) this.loops.push(lane());
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

describe.skipIf(!hasMosquitto)('several instances on one broker (Mosquitto)', () => {
  let broker: Mosquitto;
  let db: pg.Pool;
  let baseEnv: Record<string, string | undefined>;
  const running: SpawnedService[] = [];

  beforeAll(async () => {
    broker = await startMosquitto(path.join(projectRoot, 'test/ingest/fixtures/mosquitto.conf'));
    // The defaults where they matter here: no MQTT_SHARE_GROUP; one MQTT_CLIENT_ID for all.
    baseEnv = await testEnv({
      MQTT_URL: broker.url,
      MQTT_SHARE_GROUP: undefined,
      LOG_LEVEL: 'info',
      MQTT_SUBSCRIBER_CONNECTIONS: '3',
      INGEST_WORKERS: '1',
      MQTT_SESSION_EXPIRY_SECONDS: '600',
    });
    db = new pg.Pool({ connectionString: baseEnv.DATABASE_URL, max: 2 });
    db.on('error', () => undefined); // (its idle connections are cut in the database outage)
    const first = await launch(baseEnv); // creates the schema
    await stop(first);
  });
  afterEach(async () => {
    for (const s of running.splice(0)) if (s.child.exitCode === null && s.child.signalCode === null) await stop(s);
  });
  afterAll(async () => {
    for (const s of running) if (s.child.exitCode === null) s.child.kill('SIGKILL');
    await db?.end();
    await broker?.stop();
  });

  async function launch(env: Record<string, string | undefined>): Promise<SpawnedService> {
    const s = spawnService(env);
    running.push(s);
    await s.waitFor(/"msg":"ready"/, 60_000);
    return s;
  }

  async function stop(s: SpawnedService): Promise<void> {
    s.child.kill('SIGTERM');
    expect(await s.exited).toBe(0);
  }

  /** A tenant with DEVICES devices storing `seq`, and a fleet for them (not started). */
  async function fleet(): Promise<{ tenant: string; fleet: Fleet }> {
    const tenant = `mi${crypto.randomBytes(3).toString('hex')}`;
    const ids = Array.from({ length: DEVICES }, () => randomDeviceId());
    const t = await createTemplate(db, tenant, 'counter', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    await createDevices(db, tenant, t, ids);
    return { tenant, fleet: new Fleet(broker.url, tenant, ids) };
  }

  /** Waits until every message the broker acknowledged is stored; returns how many are missing and how many were stored twice or more. */
  async function settle(tenant: string, f: Fleet, timeoutMs: number): Promise<{ missing: number; duplicates: number }> {
    const count = async () => {
      const { rows } = await db.query<{ device_id: string; seq: number; n: number }>(
        'SELECT device_id, value::int AS seq, count(*)::int AS n FROM history WHERE tenant = $1 GROUP BY 1, 2',
        [tenant],
      );
      const stored = new Map<string, number>(rows.map((r) => [`${r.device_id}#${r.seq}`, r.n]));
      let missing = 0;
      for (const [id, acked] of f.acked) for (const n of acked) if (!stored.has(`${id}#${n}`)) missing++;
      return { missing, duplicates: rows.filter((r) => r.n > 1).length };
    };
    return eventually(
      async () => {
        const c = await count();
        return c.missing === 0 ? c : undefined;
      },
      'every acknowledged message stored',
      timeoutMs,
    ).catch(() => count());
  }

  const until = (cond: () => boolean, what: string) => eventually(() => cond() || undefined, what, 60_000);
  const prefixOf = async (s: SpawnedService) =>
    (JSON.parse(await s.waitFor(/connected to the MQTT broker/)) as { clientIds: string }).clientIds;
  const stored = async (s: SpawnedService) =>
    metric(
      await (await fetch(`${loggedAddress(await s.waitFor(/public HTTP API listening/))}/metrics`)).text(),
      'ingest_messages_stored_total',
    );

  it('instances started with the same settings take their own client ids in one share group: each message stored once, no session taken over', async () => {
    const a = await launch(baseEnv);
    const b = await launch(baseEnv);
    const ids = [await prefixOf(a), await prefixOf(b)];
    expect(new Set(ids).size).toBe(2);
    const { tenant, fleet: f } = await fleet();
    await f.start();
    await until(() => f.total > 3000, 'messages published');
    await f.stop();
    const result = await settle(tenant, f, 30_000);
    expect(result).toEqual({ missing: 0, duplicates: 0 });
    // Both instances took part (one group spread the load), and none lost its sessions to the other.
    expect(await stored(a)).toBeGreaterThan(0);
    expect(await stored(b)).toBeGreaterThan(0);
    for (const s of [a, b]) expect(s.output.filter((l) => /lost the broker|closed the ingest subscriber/.test(l))).toEqual([]);
  }, 120_000);

  /** Instances configured as docs/operations.md §7 used to ask: an MQTT_CLIENT_ID each. */
  const own = (env: Record<string, string | undefined>, name: string) => ({ ...env, MQTT_CLIENT_ID: `${env.MQTT_CLIENT_ID}-${name}` });

  it('an instance stopped cleanly while another runs ends its sessions: nothing waits in them', async () => {
    // Leases of a minute: a drain by the survivor would come too late for this test.
    const env = { ...baseEnv, MQTT_SESSION_LEASE_SECONDS: '60' };
    const a = await launch(own(env, 'a'));
    const b = await launch(own(env, 'b'));
    const { tenant, fleet: f } = await fleet();
    await f.start();
    await until(() => f.total > 2000, 'messages published');
    await stop(b);
    expect(b.output.some((l) => l.includes("ended this instance's broker sessions"))).toBe(true);
    const atStop = f.total;
    await until(() => f.total > atStop + 2000, 'messages published after the stop');
    await f.stop();
    expect(await settle(tenant, f, 10_000)).toEqual({ missing: 0, duplicates: 0 });
    expect(a.child.exitCode).toBeNull();
  }, 120_000);

  it('an instance killed (SIGKILL) mid-run and never started again: the survivor drains its sessions, nothing is lost', async () => {
    const env = { ...baseEnv, MQTT_SESSION_LEASE_SECONDS: '4' };
    const a = await launch(own(env, 'a'));
    const b = await launch(own(env, 'b'));
    const { tenant, fleet: f } = await fleet();
    await f.start();
    await until(() => f.total > 2000, 'messages published');
    b.child.kill('SIGKILL');
    await b.exited;
    const atKill = f.total;
    // The broker goes on routing a share to the dead instance's sessions until they are drained.
    await until(() => f.total > atKill + 4000, 'messages published after the kill');
    await a.waitFor(/drained and ended broker sessions nobody ran/, 30_000);
    const afterDrain = f.total;
    await until(() => f.total > afterDrain + 1000, 'messages published after the drain');
    await f.stop();
    const result = await settle(tenant, f, 30_000);
    console.log(
      `instance killed mid-run: ${f.total} messages acknowledged by the broker, ${result.missing} missing, ${result.duplicates} stored more than once`,
    );
    expect(result.missing).toBe(0);
  }, 180_000);

  it("a database outage longer than the lease: no instance takes another's sessions, each message stored once", async () => {
    const env = { ...baseEnv, MQTT_SESSION_LEASE_SECONDS: '3' };
    const a = await launch(own(env, 'a'));
    const b = await launch(own(env, 'b'));
    const { tenant, fleet: f } = await fleet();
    await f.start();
    await until(() => f.total > 1000, 'messages published');
    // Away for three leases: both instances miss their renewals, and both leases run out.
    const restore = await takeDatabaseAway(baseEnv.DATABASE_URL!);
    try {
      await sleep(9000);
    } finally {
      await restore();
    }
    const back = f.total;
    await until(() => f.total > back + 2000, 'messages published after the outage');
    await sleep(8000); // more than two leases of both instances renewing again
    await f.stop();
    const result = await settle(tenant, f, 60_000);
    // (a slot another test's instance left, released, may be drained: not a or b's own)
    const takeovers = [a, b].flatMap((s) =>
      s.output.filter(
        (l) =>
          /another instance took this instance's broker sessions/.test(l) ||
          (/drained and ended broker sessions/.test(l) && /"clientIds":"[^"]*-[ab][-.]/.test(l)),
      ),
    );
    expect(takeovers).toEqual([]);
    // The outage is logged once by each, and its end once (before, found by an audit, a warning
    // at every heartbeat: a long outage filled the log).
    for (const s of [a, b]) {
      expect(s.output.filter((l) => /could not renew the lease of the broker sessions/.test(l))).toHaveLength(1);
      expect(s.output.filter((l) => /the lease of the broker sessions renewed again/.test(l))).toHaveLength(1);
    }
    console.log(
      `database outage with two instances: ${f.total} acknowledged, ${result.missing} missing, ${result.duplicates} stored more than once`,
    );
    expect(result).toEqual({ missing: 0, duplicates: 0 });
  }, 180_000);

  it('after the upgrade to one default share group, a session still subscribed in the old default group (MQTT_CLIENT_ID) leaves it: nothing stored twice', async () => {
    // The session of connection 0 of a single instance as the versions before leases left it.
    const base = `${baseEnv.MQTT_CLIENT_ID}-old`;
    const old = await deviceClient(broker.url, {
      clientId: `${base}-0`,
      protocolVersion: 5,
      clean: false,
      properties: { sessionExpiryInterval: 600 },
    });
    await old.subscribeAsync([`$share/${base}/+/attrs`, `$share/${base}//+/+/attrs`], { qos: 1 });
    await old.endAsync();
    const a = await launch({ ...baseEnv, MQTT_CLIENT_ID: base, MQTT_SUBSCRIBER_CONNECTIONS: '1' });
    const { tenant, fleet: f } = await fleet();
    await f.start();
    await until(() => f.total > 2000, 'messages published');
    await f.stop();
    expect(await settle(tenant, f, 30_000)).toEqual({ missing: 0, duplicates: 0 });
    expect(a.child.exitCode).toBeNull();
  }, 120_000);

  it('a rollback and a second upgrade: the old version subscribed its default group (MQTT_CLIENT_ID) again on a slot leased before; the new version leaves it: nothing stored twice', async () => {
    // First upgrade: this version leases the slot (its lease row remembers the group it used).
    const base = `${baseEnv.MQTT_CLIENT_ID}-back`;
    const env = { ...baseEnv, MQTT_CLIENT_ID: base, MQTT_SUBSCRIBER_CONNECTIONS: '1' };
    await stop(await launch(env));
    // Rollback: the version before leases resumes the same session and subscribes in its own
    // default group, MQTT_CLIENT_ID, beside the lease's group the session still holds.
    const old = await deviceClient(broker.url, {
      clientId: `${base}-0`,
      protocolVersion: 5,
      clean: false,
      properties: { sessionExpiryInterval: 600 },
    });
    await old.subscribeAsync([`$share/${base}/+/attrs`, `$share/${base}//+/+/attrs`], { qos: 1 });
    await old.endAsync();
    // Second upgrade.
    const a = await launch(env);
    const { tenant, fleet: f } = await fleet();
    await f.start();
    await until(() => f.total > 2000, 'messages published');
    await f.stop();
    expect(await settle(tenant, f, 30_000)).toEqual({ missing: 0, duplicates: 0 });
    expect(a.child.exitCode).toBeNull();
  }, 120_000);

  it('an instance whose lease another took stops using those client ids and goes on under a new slot, nothing lost', async () => {
    const env = { ...baseEnv, MQTT_SESSION_LEASE_SECONDS: '4' };
    const a = await launch(env);
    const prefix = (await prefixOf(a)).split('-').slice(0, -1).join('-');
    const { tenant, fleet: f } = await fleet();
    await f.start();
    await until(() => f.total > 1000, 'messages published');
    // As if another instance had found the lease run out and taken the slot (a long pause, a partition).
    await db.query('UPDATE broker_sessions SET owner = gen_random_uuid() WHERE prefix = $1', [prefix]);
    await a.waitFor(/another instance took this instance's broker sessions/, 30_000);
    // The ingest thread starts again on a slot of its own; the taken slot's lease runs out, and
    // its sessions (with what they held) are drained.
    await a.waitFor(/drained and ended broker sessions nobody ran/, 60_000);
    const after = f.total;
    await until(() => f.total > after + 1000, 'messages published afterwards');
    await f.stop();
    const result = await settle(tenant, f, 30_000);
    console.log(`lease taken over: ${f.total} acknowledged, ${result.missing} missing, ${result.duplicates} stored more than once`);
    expect(result.missing).toBe(0);
  }, 180_000);
});
