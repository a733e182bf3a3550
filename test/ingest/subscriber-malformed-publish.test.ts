// A PUBLISH frame from the broker too short for what its header announces (remaining length 0,
// a topic length past the frame, a QoS 1 frame without its packet id, QoS 3) is malformed: the
// subscriber drops the connection and reconnects, hands nothing over, and does not throw (a
// throw in the socket's data handler would end the process). The broker is scripted, since no
// conforming broker sends such frames; the subscriber is the real one.
import { describe, expect, it } from 'vitest';
import { eventually } from '../helpers/registry-fixtures.js';
import { publishFrame, scriptedSubscriber, useScriptedBroker } from '../helpers/scripted-broker.js';

const MALFORMED: Array<[string, number[]]> = [
  ['remaining length 0', [0x30, 0x00]],
  ['remaining length 1', [0x30, 0x01, 0x00]],
  ['a topic length past the frame', [0x30, 0x03, 0x00, 0x09, 0x74]],
  ['QoS 1 without its packet id', [0x32, 0x03, 0x00, 0x01, 0x74]],
  ['QoS 1 with half a packet id', [0x32, 0x04, 0x00, 0x01, 0x74, 0x00]],
  ['QoS 3', [0x36, 0x05, 0x00, 0x01, 0x74, 0x00, 0x01]],
];

describe('the ingest subscriber with a broker that sends a malformed PUBLISH', () => {
  const broker = useScriptedBroker();

  it.each(MALFORMED)(
    '%s: the connection is dropped and made again, nothing is handed over, a good message after it arrives',
    async (_name, bytes) => {
      const received: string[] = [];
      const sub = scriptedSubscriber(broker, 'malformed-publish', (payload, ack) => {
        received.push(payload.toString());
        ack.ack();
      });
      await sub.start();
      try {
        const first = broker.session!;
        const before = broker.connects;
        // The malformed frame alone, so that nothing after it in the chunk lends it bytes.
        first.write(Buffer.from(bytes));
        await eventually(() => broker.connects > before && broker.session !== first, 'a new session');
        expect(first.destroyed || first.readableEnded).toBe(true);
        broker.session!.write(publishFrame(1, 't/d/attrs', 'good'));
        await eventually(() => received.length === 1, 'the good message');
        expect(received).toEqual(['good']);
      } finally {
        await sub.close();
      }
    },
  );
});
