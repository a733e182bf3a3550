// GET /stream with an `attr` filter and a stored value nested deeper than the main thread's
// stack lets JSON.stringify go (ingest's worker threads have a larger stack, so they store it):
// the client gets that message and the others committed with it. Before (found by an audit),
// the filter re-wrote the value with JSON.stringify, which threw RangeError in LiveHub.committed,
// and every `attrs` message of that commit was lost for every client of the tenant.
import crypto from 'node:crypto';
import mqtt from 'mqtt';
import { describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { historyCount, eventually } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { openSse, openWs, type LiveMessage } from './stream-client.js';

const svc = useService({ MQTT_URL: undefined });

describe('GET /stream, attr filter, a deeply nested stored value', () => {
  it('is sent as stored, and the values committed with it are sent too', async () => {
    const tenant = `deep${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(svc.base, svc.token, tenant);
    const attrs = [
      { label: 'n', type: 'dynamic', value_type: 'integer' },
      { label: 'o', type: 'dynamic', value_type: 'object' },
    ];
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, { token, body: { label: 'deep', attrs } });
    const d = await http<DevicesCreated>('POST', `${svc.base}/device`, { token, body: { label: 'dev', templates: [t.body.template.id] } });
    const id = d.body.devices[0]!.id;
    const depth = 10_000; // 20 KB of JSON, under MAX_MESSAGE_BYTES; the deepest stored (docs/messaging.md §1)
    const deep = '['.repeat(depth) + ']'.repeat(depth);

    const ws = await openWs(`${svc.base.replace('http', 'ws')}/stream?attr=n,o`, { token });
    const sse = await openSse(`${svc.base}/stream?attr=o,n&token=${token}`);
    const all = await openWs(`${svc.base.replace('http', 'ws')}/stream`, { token });
    try {
      for (const c of [ws, sse, all]) await c.next((m) => m.type === 'subscribed', 'subscribed');
      const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${id}`, reconnectPeriod: 0 });
      // Pipelined: the three are committed in one or two batches.
      await Promise.all([
        c.publishAsync(`${tenant}:${id}/attrs`, '{"n":1}', { qos: 1 }),
        c.publishAsync(`${tenant}:${id}/attrs`, `{"n":2,"o":${deep}}`, { qos: 1 }),
        c.publishAsync(`${tenant}:${id}/attrs`, '{"n":3}', { qos: 1 }),
      ]);
      await c.endAsync();
      await eventually(async () => (await historyCount(svc.service.pool, tenant, id)) >= 4 || undefined, 'stored');

      const nOf = (m: LiveMessage) => (m.attrs as { n?: number }).n;
      for (const [name, client] of [
        ['websocket', ws],
        ['sse', sse],
        ['unfiltered', all],
      ] as const) {
        // (polled, not client.next: its timeout message would JSON.stringify the deep value)
        const ns = () => client.messages.filter((m) => m.type === 'attrs').map(nOf);
        for (let i = 0; i < 50 && ns().length < 3; i++) await new Promise((r) => setTimeout(r, 100));
        expect(ns(), name).toEqual([1, 2, 3]);
        const second = client.messages.find((m) => m.type === 'attrs' && nOf(m) === 2)!;
        const o = (second.attrs as { o: unknown }).o;
        let levels = 0;
        for (let v = o; Array.isArray(v); v = v[0] as unknown) levels++;
        expect(levels, name).toBe(depth);
      }
    } finally {
      for (const c of [ws, sse, all]) c.close();
    }
  });
});
