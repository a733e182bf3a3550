// A LiveHub without uWS: a fake app hands it fake WebSockets whose send buffer a test fills and
// drains by hand, to reach the states a slow reader puts a stream in.
import type uWS from 'uWebSockets.js';
import { LiveHub } from '../../src/live/stream.js';
import { createLogger } from '../../src/log.js';
import { createMetrics } from '../../src/metrics.js';

export type Handlers = { open(ws: unknown): void; drain(ws: unknown): void; message(ws: unknown, message: ArrayBuffer): void };

export function fakeHub() {
  let handlers: Handlers | undefined;
  // A stub of the two uWS app methods LiveHub calls (ws, get), hence the cast; pool and tokens
  // are never reached by what these tests drive (`as never`).
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

export function fakeWs(maxMessages?: number) {
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

export const parsed = (t: string) => JSON.parse(t) as { type: string; dropped?: number; devices?: string[] | null };

/** A committed batch of `n` messages of device d1 of tenant t, numbered from `from`, ~80 bytes each. */
export const batch = (n: number, from: number) => ({
  tenants: Array.from({ length: n }, () => 't'),
  ids: Array.from({ length: n }, () => 'd1'),
  ts: Array.from({ length: n }, (_, i) => (from + i) * 1000),
  received: Array.from({ length: n }, (_, i) => (from + i) * 1000),
  attrs: Array.from({ length: n }, (_, i) => JSON.stringify({ n: from + i, pad: 'x'.repeat(60) })),
});
