// What the service holds for an SSE client that stopped reading (docs/live.md §3): past a write
// that uWS had to buffer its messages are dropped, so what waits for it is bounded as for a
// WebSocket client (LIVE_CLIENT_BUFFER_BYTES), never a whole commit's batch. Both clients pause
// while a burst of large messages goes by, then read again: the SSE one may not have been sent
// more than the WebSocket one (the kernel's buffers are the same for both) plus one message.
import crypto from 'node:crypto';
import net from 'node:net';
import mqtt from 'mqtt';
import { describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { http, tenantToken, useService } from '../helpers/service.js';

const BUFFER = 64 * 1024;
const NOTE = 'x'.repeat(60_000);
const svc = useService({ MQTT_URL: undefined, LIVE_CLIENT_BUFFER_BYTES: String(BUFFER) });

/** A stream client on a plain socket that reads nothing until told: its bytes, and whether `lagged` came. */
async function pausedClient(kind: 'ws' | 'sse', token: string) {
  const port = new URL(svc.base).port;
  const s = net.connect({ host: '127.0.0.1', port: Number(port) });
  await new Promise((resolve) => s.once('connect', resolve));
  const head =
    kind === 'sse'
      ? 'Accept: text/event-stream\r\n'
      : 'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n';
  s.write(`GET /stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n${head}\r\n`);
  const state = { bytes: 0, tail: '', subscribed: false, lagged: false };
  s.on('data', (d: Buffer) => {
    state.bytes += d.length;
    // (the last bytes only: a message may span chunks, the notes are long)
    state.tail = (state.tail + d.toString('latin1')).slice(-200_000);
    state.subscribed ||= state.tail.includes('"subscribed"');
    state.lagged ||= state.tail.includes('"lagged"');
  });
  const until = async (what: () => boolean) => {
    for (let i = 0; i < 100 && !what(); i++) await new Promise((r) => setTimeout(r, 100));
  };
  await until(() => state.subscribed);
  expect(state.subscribed).toBe(true);
  s.pause();
  return { state, resume: () => s.resume(), until, close: () => s.destroy() };
}

describe('an SSE client that stopped reading', () => {
  it('is held no more than a WebSocket client by a burst of large messages', async () => {
    const name = `ssebuf${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(svc.base, svc.token, name);
    const attrs = [{ label: 'note', type: 'dynamic', value_type: 'string' }];
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, { token, body: { label: 's', attrs } });
    const d = await http<DevicesCreated>('POST', `${svc.base}/device`, { token, body: { label: 'd', templates: [t.body.template.id] } });
    const id = d.body.devices[0]!.id;
    const ws = await pausedClient('ws', token);
    const sse = await pausedClient('sse', token);
    const c = await mqtt.connectAsync(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${name}:${id}`, reconnectPeriod: 0 });
    try {
      c.setMaxListeners(0);
      // QoS 0 and no wait: many messages land in each commit's batch.
      await Promise.all(
        Array.from({ length: 1500 }, (_, i) => c.publishAsync(`${name}:${id}/attrs`, JSON.stringify({ note: `${i}${NOTE}` }), { qos: 0 })),
      );
      await new Promise((r) => setTimeout(r, 1000));
      ws.resume();
      sse.resume();
      await ws.until(() => ws.state.lagged);
      await sse.until(() => sse.state.lagged);
      expect({ ws: ws.state.lagged, sse: sse.state.lagged }).toEqual({ ws: true, sse: true });
      const mib = (n: number) => Math.round((n / 1048576) * 10) / 10;
      expect(mib(sse.state.bytes)).toBeLessThanOrEqual(mib(ws.state.bytes + BUFFER + NOTE.length));
    } finally {
      await c.endAsync();
      ws.close();
      sse.close();
    }
  });
});
