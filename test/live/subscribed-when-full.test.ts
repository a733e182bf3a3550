// A WebSocket client that changes its subscription while its send buffer is full (a slow reader)
// still gets the `subscribed` naming its new filters, which docs/live.md tells clients to wait
// for: it goes out first once the buffer drains, then `lagged` with what was lost meanwhile.
// Before (found by an audit), the `subscribed` was dropped like telemetry and only counted in
// `lagged`, so a client waiting for it waited forever. The hub runs without uWS here
// (test/live/fake-uws.ts): the buffer is filled and drained by hand.
import { expect, it } from 'vitest';
import { batch, fakeHub, fakeWs, parsed } from './fake-uws.js';

const settle = () => new Promise((r) => setTimeout(r, 10));
const subscribe = (devices: string[]) => new TextEncoder().encode(JSON.stringify({ type: 'subscribe', devices })).buffer;

it('a subscription changed while the buffer is full is confirmed once it drains, before lagged', async () => {
  const { hub, handlers } = fakeHub();
  const w = fakeWs();
  handlers.open(w.ws);
  await settle();
  expect(parsed(w.sent[0]!).type).toBe('subscribed');
  w.drain();
  // A commit fills the buffer (100 bytes): the first message goes out, 4 are lost.
  hub.committed(batch(5, 0));
  // The client subscribes anew (it may write while it does not read): no room for the answer.
  handlers.message(w.ws, subscribe(['d1']));
  await settle();
  hub.committed(batch(3, 5));
  const before = w.sent.length;
  expect(w.sent.map((t) => parsed(t).type)).toEqual(['subscribed', 'attrs']);
  // The buffer drains (twice: the confirmation alone takes more than half of this tiny buffer):
  // the new subscription's confirmation first, then what was lost.
  for (let i = 0; i < 2; i++) {
    w.drain();
    handlers.drain(w.ws);
  }
  const after = w.sent.slice(before).map(parsed);
  expect(after[0]).toMatchObject({ type: 'subscribed', devices: ['d1'] });
  expect(after.find((m) => m.type === 'lagged')).toEqual({ type: 'lagged', dropped: 7 });
  // From then on the new subscription's messages flow.
  w.drain();
  hub.committed(batch(1, 8));
  expect(parsed(w.sent.at(-1)!).type).toBe('attrs');
  hub.close();
});
