// A COPY that commits while its answer is lost (the connection to the database cut at that very
// moment: no process dies) is not written again: ingest asks the database whether that
// transaction committed before it sends the rows a second time. Before, each such cut stored a
// whole batch twice (seen from outside: 50-60 rows a cut at 2,000 msg/s).
import crypto from 'node:crypto';
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, testEnv, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { checkSequence, listenAsProxy, publishSequence } from '../helpers/faults.js';

/**
 * A TCP proxy to PostgreSQL that, while armed, cuts a connection at the answer that ends a COPY's
 * transaction: the first ReadyForQuery "idle" after a CopyInResponse. The server has committed;
 * the client never hears it.
 */
async function commitCuttingProxy(databaseUrl: string) {
  const target = new URL(databaseUrl);
  const sockets = new Set<net.Socket>();
  let armed = 0;
  let cuts = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    const cut = () => {
      for (const s of [client, upstream]) {
        s.destroy();
        sockets.delete(s);
      }
    };
    client.on('error', cut).on('close', cut);
    upstream.on('error', cut).on('close', cut);
    client.pipe(upstream);
    let pending = Buffer.alloc(0);
    let copying = false;
    upstream.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      let at = 0;
      while (pending.length - at >= 5) {
        const type = String.fromCharCode(pending[at]!);
        const end = at + 1 + pending.readUInt32BE(at + 1);
        if (end > pending.length) break;
        if (type === 'G') copying = true;
        if (type === 'Z' && copying && pending[at + 5] === 'I'.charCodeAt(0)) {
          copying = false;
          if (armed > 0) {
            armed--;
            cuts++;
            if (at > 0) client.write(pending.subarray(0, at));
            return cut();
          }
        }
        at = end;
      }
      if (at > 0) client.write(pending.subarray(0, at));
      pending = pending.subarray(at);
    });
  });
  const url = await listenAsProxy(server, databaseUrl);
  return {
    url,
    arm(times: number) {
      armed = times;
    },
    cuts: () => cuts,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe("a COPY's commit whose answer is lost", () => {
  let svc: TestService;
  let proxy: Awaited<ReturnType<typeof commitCuttingProxy>>;
  let db: pg.Pool;
  const tenant = `cl${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    // The embedded broker: a device's PUBACK comes after the commit, so each round is its own batches.
    const env = await testEnv({ INGEST_WORKERS: '1', MQTT_URL: undefined });
    db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 2 });
    proxy = await commitCuttingProxy(env.DATABASE_URL!);
    svc = await startTestService({ ...env, DATABASE_URL: proxy.url });
    const t = await createTemplate(db, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(db, tenant, [t]);
  });
  afterAll(async () => {
    await svc?.stop();
    await proxy?.close();
    await db?.end();
  });

  it('is not written again: every acknowledged message stored once', async () => {
    const client = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${device}` });
    const topic = `${tenant}:${device}/attrs`;
    try {
      const acked: number[] = [];
      proxy.arm(3);
      // Rounds until the three cuts happened (each at the commit of one batch).
      for (let round = 0; proxy.cuts() < 3 && round < 50; round++) {
        acked.push(...(await publishSequence(client, topic, round * 20, 20)));
      }
      expect(proxy.cuts()).toBe(3);
      await eventually(async () => (await historyCount(db, tenant, device)) >= acked.length || undefined, 'every message stored', 30_000);
      expect(await checkSequence(db, tenant, acked)).toEqual({ lost: [], duplicates: 0, stored: acked.length });
    } finally {
      await client.endAsync();
    }
  });
});
