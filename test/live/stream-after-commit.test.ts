// Issue 23's first promise of the stream: each telemetry message is sent "after it is committed,
// never before" (docs/live.md §2, `attrs`). stream.test.ts reads history once the message has
// arrived, which a message sent before its commit would pass as well (the commit follows a few
// milliseconds later). Here the commit is held: the history table is locked, the device publishes,
// and while its COPY waits for the lock no `attrs` (nor the `status` `online` it brings) reaches
// the client; once the lock goes, both come, and history has the value. Checked by an audit, which
// found the service right and the sentence without a test that could fail.
import mqtt from 'mqtt';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';
import { openWs, type LiveMessage } from './stream-client.js';

const svc = useService({ MQTT_URL: undefined });

describe('the stream and the commit', () => {
  it('sends a message, and its status change, only once its COPY has committed', async () => {
    const user = await svc.freshTenant('commit', 'admin');
    const t = await createTemplate(svc.base, user.token, { label: 'c', attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] });
    const [{ id }] = await createDevices(svc.base, user.token, { label: 'c', templates: [t.id] });
    const stream = await openWs(`${svc.base.replace('http', 'ws')}/stream?device=${id}`, { token: user.token });
    const db = new pg.Client({ connectionString: svc.env.DATABASE_URL });
    await db.connect();
    let device: mqtt.MqttClient | undefined;
    try {
      await stream.next((m) => m.type === 'subscribed', 'subscribed');
      await db.query('BEGIN');
      // (every partition of it too: LOCK TABLE recurses)
      await db.query('LOCK TABLE history IN ACCESS EXCLUSIVE MODE');
      device = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${user.tenant}:${id}` });
      // Acknowledged only once stored: not awaited while the lock is held.
      const acked = device.publishAsync(`${user.tenant}:${id}/attrs`, JSON.stringify({ n: 7 }), { qos: 1 });
      // The service has the message: its COPY waits for the lock.
      await eventually(async () => {
        const { rows } = await db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE NOT l.granted AND a.pid <> pg_backend_pid()`,
        );
        return rows[0]!.n > 0 || undefined;
      }, 'a write waiting for the lock');
      await new Promise((r) => setTimeout(r, 1000));
      const ofDevice = (m: LiveMessage) => (m.type === 'attrs' || m.type === 'status') && m.device_id === id;
      expect(stream.messages.filter(ofDevice)).toEqual([]);

      await db.query('COMMIT');
      expect(await stream.next((m) => m.type === 'attrs' && m.device_id === id, 'the message after its commit')).toMatchObject({
        attrs: { n: 7 },
      });
      // (a first message committed more than a second after it came in is told `online` once its
      // template's timeout is read, so after its `attrs`: docs/live.md §1)
      expect(await stream.next((m) => m.type === 'status' && m.device_id === id, 'online')).toMatchObject({ status: 'online' });
      await acked;
      const history = await http<Array<{ value: unknown }>>('GET', `${svc.base}/history/device/${id}/history?attr=n`, {
        token: user.token,
      });
      expect(history.body.map((r) => r.value)).toEqual([7]);
    } finally {
      await db.query('ROLLBACK').catch(() => undefined);
      await db.end();
      await device?.endAsync();
      stream.close();
    }
  }, 60_000);
});
