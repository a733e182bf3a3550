// LIVE_MAX_CLIENTS_PER_TENANT (docs/live.md §3): a tenant has at most that many streams open on
// an instance, WebSocket and SSE together, each holding up to LIVE_CLIENT_BUFFER_BYTES; past it
// the stream is refused with 429 and the clients already open are untouched. Another tenant is
// not affected, and a stream closed makes room again. Opened all at once, no more get through.
import { describe, expect, it } from 'vitest';
import type { ErrorBody } from '../helpers/api.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { openSse, openWs, type StreamClient } from './stream-client.js';

const MAX = 3;
const svc = useService({ MQTT_URL: undefined, LIVE_MAX_CLIENTS_PER_TENANT: String(MAX) });
const wsUrl = () => `${svc.base.replace('http', 'ws')}/stream`;
const refusal = {
  message: `This tenant has ${MAX} live streams open on this instance, the most allowed (LIVE_MAX_CLIENTS_PER_TENANT); close one first`,
  status: 429,
};

/** Opens a stream of either transport; the HTTP status of a refusal, or the open client. */
async function open(kind: 'ws' | 'sse', token: string): Promise<StreamClient | number> {
  try {
    const c = kind === 'ws' ? await openWs(wsUrl(), { token }) : await openSse(`${svc.base}/stream`, token);
    await c.next((m) => m.type === 'subscribed', 'subscribed');
    return c;
  } catch (err) {
    const status = /HTTP (\d+)/.exec((err as Error).message)?.[1];
    if (status) return Number(status);
    throw err;
  }
}

describe('live streams per tenant', () => {
  it(`at most ${MAX} open, WebSocket and SSE together; past it 429; another tenant unaffected; a closed one makes room`, async () => {
    const a = await tenantToken(svc.base, svc.token, 'lima');
    const b = await tenantToken(svc.base, svc.token, 'limb');
    const first = [await open('ws', a), await open('sse', a), await open('ws', a)];
    expect(first.every((c) => typeof c === 'object')).toBe(true);
    expect(await open('ws', a)).toBe(429);
    expect(await open('sse', a)).toBe(429);
    const body = await http<ErrorBody>('GET', `${svc.base}/stream`, { token: a, headers: { accept: 'text/event-stream' } });
    expect([body.status, body.body]).toEqual([429, refusal]);
    // The open ones still work, and the other tenant has its own room.
    const other = await open('sse', b);
    expect(typeof other).toBe('object');
    (first[0] as StreamClient).close();
    const again = await eventually(async () => {
      const c = await open('ws', a);
      return typeof c === 'object' ? c : undefined;
    }, 'room for a stream once one closed');
    for (const c of [...first.slice(1), other, again]) (c as StreamClient).close();
  });

  it(`${MAX * 3} opened at once: ${MAX} get through, the rest are refused with 429`, async () => {
    const t = await tenantToken(svc.base, svc.token, 'limc');
    const all = await Promise.all(Array.from({ length: MAX * 3 }, (_, i) => open(i % 2 === 0 ? 'ws' : 'sse', t)));
    const opened = all.filter((c): c is StreamClient => typeof c === 'object');
    expect({ opened: opened.length, refused: all.filter((c) => c === 429).length }).toEqual({ opened: MAX, refused: MAX * 2 });
    for (const c of opened) c.close();
  });
});
