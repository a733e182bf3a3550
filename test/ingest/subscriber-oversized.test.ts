// MAX_MESSAGE_BYTES on the external-broker path with a broker that does not speak MQTT 5 (aedes
// here): the subscriber connection cannot announce a Maximum Packet Size there, so the broker
// sends a device's packet whatever its size. Before (found by an audit), the subscriber gathered
// the whole packet before looking at it, one Buffer.concat per socket chunk (quadratic: a 20 MB
// payload took ~25 s of CPU, and the packet could reach MQTT's 256 MiB), and every message behind
// it on the connection (the only one: MQTT 3.1.1) waited meanwhile. Now a PUBLISH announcing more
// than `MAX_MESSAGE_BYTES` + 128 KiB is counted `oversized` and acknowledged as soon as its topic
// and packet id are in, and the rest of it is skipped as it arrives, never held.
import crypto from 'node:crypto';
import net from 'node:net';
import { Aedes } from 'aedes';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import { http, startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate, deviceClient, eventually, metric } from '../helpers/registry-fixtures.js';

describe('an oversized message through a broker without MQTT 5 (aedes)', () => {
  let broker: Aedes;
  let server: net.Server;
  let url: string;
  let svc: TestService;
  let db: pg.Pool;

  beforeAll(async () => {
    broker = await Aedes.createBroker();
    server = net.createServer(broker.handle);
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    url = `mqtt://127.0.0.1:${port}`;
    svc = await startTestService({ MQTT_URL: url, MAX_MESSAGE_BYTES: '1024' });
    db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 2 });
  });

  afterAll(async () => {
    await svc?.stop();
    await db?.end();
    await new Promise<void>((resolve) => broker.close(() => server.close(() => resolve())));
  });

  it('is counted and skipped at once, never gathered, and the next message is not held behind it', async () => {
    const tenant = `ov${crypto.randomBytes(3).toString('hex')}`;
    const t = await createTemplate(db, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    const id = await createDevice(db, tenant, [t]);
    const topic = `${tenant}:${id}/attrs`;
    const device = await deviceClient(url, { username: `${tenant}:${id}` });
    try {
      const metrics = async () => (await http('GET', `${svc.internal}/metrics`)).text;
      const before = metric(await metrics(), 'ingest_dropped_total{reason="oversized"}');
      // 40 MB: before, ~100 s of concatenation (more on a loaded machine) before it was even seen.
      const big = `{"seq":0,"pad":"${'x'.repeat(40_000_000)}"}`;
      await device.publishAsync(topic, big, { qos: 1 });
      await device.publishAsync(topic, JSON.stringify({ seq: 1 }), { qos: 1 });
      await eventually(
        async () => {
          const { rows } = await db.query(`SELECT value FROM history WHERE tenant = $1 AND device_id = $2 AND attr = 'seq'`, [tenant, id]);
          return rows.length > 0 ? rows : undefined;
        },
        'the message after the oversized one stored',
        15_000,
      );
      expect(metric(await metrics(), 'ingest_dropped_total{reason="oversized"}')).toBe(before + 1);
      const { rows } = await db.query(`SELECT value FROM history WHERE tenant = $1 AND device_id = $2 AND attr = 'seq'`, [tenant, id]);
      expect(rows.map((r: { value: string }) => Number(r.value))).toEqual([1]);
      // The link kept its connection: nothing malformed, no reconnect.
      expect(metric(await metrics(), 'broker_link_reconnects_total')).toBe(0);
    } finally {
      await device.endAsync();
    }
  }, 60_000);
});
