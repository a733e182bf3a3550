// Device status (docs/live.md): every GET device view (public and internal) carries `last_seen` (when its last stored
// message was received) and `status` from the inactivity timeout (DEVICE_OFFLINE_AFTER_SECONDS,
// or the largest `offline_after` of its templates); GET /device?status= filters on it; the times
// are written in batches and read back after a restart. Runs the embedded broker.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, startTestService, login, tenantToken } from '../helpers/service.js';

interface StatusView {
  id: string;
  last_seen: string | null;
  status: 'online' | 'offline';
}

describe('device status', () => {
  it('last_seen and status in the views, the status filter, per-template timeouts, kept across a restart', async () => {
    // A short default timeout (2 s) and a template whose devices stay online for an hour.
    const env = { MQTT_URL: undefined, DEVICE_OFFLINE_AFTER_SECONDS: '2', DEVICE_STATUS_FLUSH_MS: '200' };
    let svc = await startTestService(env);
    try {
      const token = await tenantToken(svc.base, await login(svc.base), 'status');
      const attrs = [{ label: 'temperature', type: 'dynamic', value_type: 'float' }];
      const short = await http<TemplateCreated>('POST', `${svc.base}/template`, { token, body: { label: 'short', attrs } });
      const long = await http<TemplateCreated & { template: { offline_after?: number } }>('POST', `${svc.base}/template`, {
        token,
        body: { label: 'long', attrs, offline_after: 3600 },
      });
      expect(long.status).toBe(200);
      expect(long.body.template.offline_after).toBe(3600);
      expect(short.body.template).not.toHaveProperty('offline_after'); // unset: the answer as before

      // A bad offline_after is a 400 that changes nothing.
      const bad = await http('POST', `${svc.base}/template`, { token, body: { label: 'bad', attrs, offline_after: 0 } });
      expect(bad.status).toBe(400);
      expect(bad.body).toMatchObject({ message: 'failed to parse input', errors: { offline_after: expect.anything() as unknown } });

      const create = async (label: string, templateId: number) =>
        (await http<DevicesCreated>('POST', `${svc.base}/device`, { token, body: { label, templates: [templateId] } })).body.devices[0]!.id;
      const quick = await create('quick', short.body.template.id);
      const slow = await create('slow', long.body.template.id);
      const never = await create('never', short.body.template.id);

      const view = async (id: string) => (await http<StatusView>('GET', `${svc.base}/device/${id}?withStatus`, { token })).body;
      expect(await view(never)).toMatchObject({ last_seen: null, status: 'offline' });
      // Without withStatus the view is exactly as before.
      const plain = await http<Record<string, unknown>>('GET', `${svc.base}/device/${never}`, { token });
      expect(Object.keys(plain.body)).toEqual(['id', 'label', 'created', 'templates', 'attrs']);
      const page = await http<{ devices: StatusView[] }>('GET', `${svc.base}/device/template/${short.body.template.id}?withStatus`, {
        token,
      });
      expect(page.body.devices.map((v) => v.status)).toEqual(['offline', 'offline']);

      const before = Date.now();
      for (const id of [quick, slow]) {
        const mqtt = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `status:${id}` });
        await mqtt.publishAsync(`status:${id}/attrs`, JSON.stringify({ temperature: 1 }), { qos: 1 });
        await mqtt.endAsync();
      }
      {
        // Acknowledged means committed; the commit reaches the status book a moment later.
        const seen = await eventually(async () => {
          const v = await view(quick);
          return v.status === 'online' ? v : undefined;
        }, 'the device online');
        expect(Date.parse(seen.last_seen!)).toBeGreaterThanOrEqual(before - 1000);
        expect(seen.last_seen).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/);
      }
      const online = await http<{ devices: StatusView[] }>('GET', `${svc.base}/device?status=online`, { token });
      expect(online.body.devices.map((d) => d.id).sort()).toEqual([quick, slow].sort());
      expect(online.body.devices.every((d) => d.status === 'online')).toBe(true);

      // After 2 s the device of the short template is offline, the other still online.
      await eventually(async () => ((await view(quick)).status === 'offline' ? true : undefined), 'the device offline');
      expect((await view(slow)).status).toBe('online');
      const offline = await http<{ devices: StatusView[] }>('GET', `${svc.base}/device?status=offline`, { token });
      expect(offline.body.devices.map((d) => d.id).sort()).toEqual([quick, never].sort());
      expect((await http<string[]>('GET', `${svc.base}/device?status=online&idsOnly`, { token })).body).toEqual([slow]);
      // A template's devices take the filter too: of the short template's two, the one never seen.
      const ofShort = async (q: string) =>
        http<{ devices: StatusView[]; pagination: { total: number } }>(
          'GET',
          `${svc.base}/device/template/${short.body.template.id}?${q}`,
          {
            token,
          },
        );
      expect((await ofShort('status=offline')).body.devices.map((d) => [d.id, d.status]).sort()).toEqual(
        [
          [quick, 'offline'],
          [never, 'offline'],
        ].sort(),
      );
      expect((await ofShort('status=online')).body).toMatchObject({ devices: [], pagination: { total: 0 } });
      expect(
        (
          await http<{ devices: StatusView[] }>('GET', `${svc.base}/device/template/${long.body.template.id}?status=online`, { token })
        ).body.devices.map((d) => d.id),
      ).toEqual([slow]);
      expect((await ofShort('status=asleep')).body).toEqual({ message: 'status must be online or offline, got "asleep"', status: 400 });
      // A registry change in the tenant (a new template, a device updated) has every timeout read
      // again: meanwhile the one read before holds, never the default (2 s here), which would
      // show the hour-long device offline for a moment.
      const otherTemplate = await http<TemplateCreated>('POST', `${svc.base}/template`, { token, body: { label: 'other', attrs } });
      expect(otherTemplate.status).toBe(200);
      await http('PUT', `${svc.base}/device/${slow}`, { token, body: { label: 'slow', templates: [long.body.template.id] } });
      const seen: string[] = [];
      for (let i = 0; i < 30; i++) {
        seen.push(`${(await view(slow)).status}/${(await view(quick)).status}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(new Set(seen)).toEqual(new Set(['online/offline']));
      // The internal listener's views too, on request.
      const internalView = await http<StatusView>('GET', `${svc.internal}/internal/device/${slow}?withStatus`, { token });
      expect(internalView.body).toMatchObject({ id: slow, status: 'online', last_seen: expect.any(String) as unknown });
      expect(await http('GET', `${svc.internal}/internal/device/${slow}`, { token })).not.toHaveProperty('body.status');
      expect((await http<string[]>('GET', `${svc.internal}/internal/device?status=online&idsOnly`, { token })).body).toEqual([slow]);
      const internalOffline = await http<{ devices: StatusView[] }>('GET', `${svc.internal}/internal/device?status=offline`, { token });
      expect(internalOffline.body.devices.map((d) => [d.id, d.status]).sort()).toEqual(
        [
          [quick, 'offline'],
          [never, 'offline'],
        ].sort(),
      );
      const wrong = await http('GET', `${svc.base}/device?status=sleeping`, { token });
      expect(wrong.status).toBe(400);
      expect(wrong.body).toEqual({ message: 'status must be online or offline, got "sleeping"', status: 400 });

      // The times are in the database (batched), and a new service on it shows them again.
      const db = new pg.Client({ connectionString: svc.env.DATABASE_URL });
      await db.connect();
      const rows = await db.query('SELECT device_id FROM device_status ORDER BY device_id');
      await db.end();
      expect(rows.rows.map((r: { device_id: string }) => r.device_id)).toEqual([quick, slow].sort());
      const lastSeen = (await view(slow)).last_seen;
      await svc.stop();
      svc = await startTestService({ ...env, DATABASE_URL: svc.env.DATABASE_URL, DATA_DIR: svc.env.DATA_DIR });
      const again = await tenantToken(svc.base, await login(svc.base), 'status');
      const after = (await http<StatusView>('GET', `${svc.base}/device/${slow}?withStatus=true`, { token: again })).body;
      expect(after).toMatchObject({ status: 'online', last_seen: lastSeen });
    } finally {
      await svc.stop();
    }
  }, 120_000);
});
