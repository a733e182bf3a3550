// max_messages and a client whose buffer fills in the middle of a batch that is longer than what
// max_messages still allows: every message it loses is counted in its `lagged` (the stream goes
// on, since those dropped do not count toward max_messages), not only those within the limit.
// The hub runs without uWS here: a fake app hands it a fake WebSocket whose buffer we fill.
import { describe, expect, it } from 'vitest';
import type uWS from 'uWebSockets.js';
import { LiveHub } from '../../src/live/stream.js';
import { createLogger } from '../../src/log.js';
import { createMetrics } from '../../src/metrics.js';

type Handlers = { open(ws: unknown): void; drain(ws: unknown): void };

function fakeHub() {
  let handlers: Handlers | undefined;
  const app = { ws: (_p: string, h: Handlers) => (handlers = h), get: () => undefined } as unknown as uWS.TemplatedApp;
  const hub = new LiveHub({
    pool: {} as never,
    tokens: {} as never,
    metrics: createMetrics(),
    log: createLogger('error'),
    bufferBytes: 100,
    maxClientsPerTenant: 10,
  });
  hub.attach(app);
  return { hub, handlers: handlers! };
}

function fakeWs(maxMessages: number) {
  const sent: string[] = [];
  let buffered = 0;
  const data = {
    tenant: 't',
    claims: { exp: Math.floor(Date.now() / 1000) + 3600 },
    sub: { devices: undefined, templates: undefined, attrs: undefined },
    maxMessages,
  };
  const ws = {
    getUserData: () => data,
    cork: (f: () => void) => f(),
    getBufferedAmount: () => buffered,
    send: (t: string) => {
      sent.push(t);
      buffered += t.length;
      return 1;
    },
    end: () => undefined,
  };
  return { ws, sent, drain: () => (buffered = 0) };
}

const parsed = (t: string) => JSON.parse(t) as { type: string; dropped?: number };

const batch = (n: number, from: number) => ({
  tenants: Array.from({ length: n }, () => 't'),
  ids: Array.from({ length: n }, () => 'd1'),
  ts: Array.from({ length: n }, (_, i) => (from + i) * 1000),
  received: Array.from({ length: n }, (_, i) => (from + i) * 1000),
  attrs: Array.from({ length: n }, (_, i) => JSON.stringify({ n: from + i, pad: 'x'.repeat(60) })),
});

describe('max_messages, a client whose buffer fills within a batch longer than the limit', () => {
  it('counts every message it lost in its lagged', async () => {
    const { hub, handlers } = fakeHub();
    const w = fakeWs(10);
    handlers.open(w.ws);
    await new Promise((r) => setTimeout(r, 10));
    expect(parsed(w.sent[0]!).type).toBe('subscribed');
    w.drain();
    // 20 messages in one commit, 9 places left: the first fills the buffer (100 bytes), 19 are lost.
    hub.committed(batch(20, 0));
    const got = w.sent.filter((t) => parsed(t).type === 'attrs').length;
    expect(got).toBe(1);
    w.drain();
    handlers.drain(w.ws);
    const lagged = w.sent.map(parsed).find((m) => m.type === 'lagged');
    expect(lagged).toEqual({ type: 'lagged', dropped: 19 });
    hub.close();
  });
});
