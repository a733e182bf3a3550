// One device's messages are handled in arrival order (docs/messaging.md §3 "Order"), also when
// one of them is set aside to be rendered again with its device read afresh (device-cache.ts:
// a key its cached model, older than the message by more than a second, does not know). Found by
// an audit: the set-aside message was rendered after the rest of its batch, so the live stream
// told a device's later messages before it (n=2, n=3, then n=1).
import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { openWs, type LiveMessage } from '../live/stream-client.js';

const svc = useService({ MQTT_URL: undefined });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a message set aside for a fresh read of its device', () => {
  it('keeps its place among the device’s messages', async () => {
    const tenant = `ord${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(svc.base, svc.token, tenant);
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, {
      token,
      body: { label: 'counter', attrs: [{ label: 'n', type: 'dynamic', value_type: 'integer' }] },
    });
    const d = await http<DevicesCreated>('POST', `${svc.base}/device`, { token, body: { label: 'dev', templates: [t.body.template.id] } });
    const id = d.body.devices[0]!.id;
    const stream = await openWs(`${svc.base.replace('http', 'ws')}/stream`, { token });
    const c = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${id}` });
    try {
      const attrsOf = (m: LiveMessage) => m.type === 'attrs' && m.device_id === id;
      // The device's model is cached by a first message...
      await c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: 0 }), { qos: 1 });
      await stream.next(attrsOf, 'n=0');
      // ...and is more than a second older than the next ones: a key it does not know sets the
      // first of them aside for a fresh read (one batch: pipelined within the router's 50 ms).
      await sleep(1500);
      await Promise.all([
        c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: 1, not_an_attr: true }), { qos: 1 }),
        c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: 2 }), { qos: 1 }),
        c.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ n: 3 }), { qos: 1 }),
      ]);
      await eventually(() => stream.messages.filter(attrsOf).length >= 4, 'all four told');
      const told = stream.messages.filter(attrsOf).map((m) => (m.attrs as { n: number }).n);
      expect(told).toEqual([0, 1, 2, 3]);
      // Stored in the same order of time (each with its receive time).
      const res = await http<{ attr: string; value: number; ts: string }[]>(
        'GET',
        `${svc.base}/history/device/${id}/history?lastN=10&attr=n`,
        { token },
      );
      expect(res.status).toBe(200);
      const byTime = [...res.body].sort((a, b) => (a.ts < b.ts ? -1 : 1)).map((r) => r.value);
      expect(byTime).toEqual([0, 1, 2, 3]);
    } finally {
      await c.endAsync();
      stream.close();
    }
  });
});
