// max_messages and a client whose buffer fills in the middle of a batch that is longer than what
// max_messages still allows: every message it loses is counted in its `lagged` (the stream goes
// on, since those dropped do not count toward max_messages), not only those within the limit.
// The hub runs without uWS here: a fake app hands it a fake WebSocket whose buffer we fill.
import { describe, expect, it } from 'vitest';
import { batch, fakeHub, fakeWs, parsed } from './fake-uws.js';

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
