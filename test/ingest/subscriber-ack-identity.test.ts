// Point 5 of issue 19: an ack only ever acknowledges the message it was made for. A broker may
// reuse a packet id as soon as it was acknowledged; had a second copy of a message been sent on
// the live connection (MQTT forbids it, a faulty broker might), that copy's handle, used later,
// must not PUBACK the new message that now has the id, before that one is committed.
// The broker here is scripted (mqtt-packet over TCP), since no conforming broker resends on a
// live connection; the subscriber is the real one.
import { describe, expect, it } from 'vitest';
import type { AckHandle } from '../../src/broker/link.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { publishFrame, scriptedSubscriber, useScriptedBroker } from '../helpers/scripted-broker.js';

describe('the ingest subscriber with a broker that resends on a live connection', () => {
  const broker = useScriptedBroker();
  /** Packet ids of the PUBACKs that reached the broker, in order. */
  const pubacks = () => broker.received.flatMap((p) => (p.cmd === 'puback' ? [p.messageId!] : []));
  const publish = (id: number, payload: string, dup = false) => broker.session!.write(publishFrame(id, 't/d/attrs', payload, dup));

  it('a stale handle of a reused packet id sends no PUBACK; the message that has the id now is acknowledged by its own', async () => {
    const received: Array<{ payload: string; ack: AckHandle }> = [];
    const sub = scriptedSubscriber(broker, 'ack-identity', (payload, ack) => received.push({ payload: payload.toString(), ack }));
    await sub.start();
    try {
      publish(7, 'A');
      publish(7, 'A', true); // sent again while in flight
      await eventually(() => received.length === 2, 'both copies');
      received[0]!.ack.ack(); // A committed
      await eventually(() => pubacks().length === 1, 'the PUBACK of A');
      expect(pubacks()).toEqual([7]);

      publish(7, 'B'); // the id, reused for a new message
      await eventually(() => received.length === 3, 'B');
      received[1]!.ack.ack(); // the second copy of A, committed later
      await new Promise((r) => setTimeout(r, 300));
      expect(pubacks()).toEqual([7]); // B is not committed: no PUBACK for it yet

      received[2]!.ack.ack(); // B committed
      await eventually(() => pubacks().length === 2, 'the PUBACK of B');
      expect(pubacks()).toEqual([7, 7]);
    } finally {
      await sub.close();
    }
  });
});
