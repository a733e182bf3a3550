// A PUBLISH frame from the broker too short for what its header announces (remaining length 0,
// a topic length past the frame, a QoS 1 frame without its packet id, QoS 3) is malformed: the
// subscriber drops the connection and reconnects, hands nothing over, and does not throw (a
// throw in the socket's data handler would end the process). The broker is scripted, since no
// conforming broker sends such frames; the subscriber is the real one.
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SubscriberConnection } from '../../src/broker/subscriber.js';
import { createLogger } from '../../src/log.js';
import { freePort } from '../../src/net.js';
import { eventually } from '../helpers/registry-fixtures.js';

const MALFORMED: Array<[string, number[]]> = [
  ['remaining length 0', [0x30, 0x00]],
  ['remaining length 1', [0x30, 0x01, 0x00]],
  ['a topic length past the frame', [0x30, 0x03, 0x00, 0x09, 0x74]],
  ['QoS 1 without its packet id', [0x32, 0x03, 0x00, 0x01, 0x74]],
  ['QoS 1 with half a packet id', [0x32, 0x04, 0x00, 0x01, 0x74, 0x00]],
  ['QoS 3', [0x36, 0x05, 0x00, 0x01, 0x74, 0x00, 0x01]],
];

describe('the ingest subscriber with a broker that sends a malformed PUBLISH', () => {
  let server: net.Server;
  let url: string;
  /** The CONNECTs received, and the socket of the latest session (open once its SUBACK is sent). */
  let connects = 0;
  let session: net.Socket | undefined;

  beforeAll(async () => {
    server = net.createServer((s) => {
      const parser = mqttPacket.parser({ protocolVersion: 4 });
      parser.on('packet', (p: Packet) => {
        if (p.cmd === 'connect') {
          connects++;
          s.write(mqttPacket.generate({ cmd: 'connack', returnCode: 0, sessionPresent: false }));
        } else if (p.cmd === 'subscribe') {
          s.write(mqttPacket.generate({ cmd: 'suback', messageId: p.messageId!, granted: [1] }));
          session = s;
        } else if (p.cmd === 'pingreq') s.write(mqttPacket.generate({ cmd: 'pingresp' }));
      });
      s.on('data', (d: Buffer) => parser.parse(d));
      s.on('error', () => undefined);
    });
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    url = `mqtt://127.0.0.1:${port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it.each(MALFORMED)(
    '%s: the connection is dropped and made again, nothing is handed over, a good message after it arrives',
    async (_name, bytes) => {
      const received: string[] = [];
      const sub = new SubscriberConnection({
        url,
        clientId: 'malformed-publish',
        version: 4,
        filters: ['t/+/attrs'],
        sessionExpirySeconds: 60,
        receiveMaximum: 100,
        log: createLogger('silent'),
        onMessage(_topic, payload, ack) {
          received.push(payload.toString());
          ack.ack();
        },
      });
      session = undefined;
      await sub.start();
      try {
        const first = session!;
        const before = connects;
        // The malformed frame alone, so that nothing after it in the chunk lends it bytes.
        first.write(Buffer.from(bytes));
        await eventually(() => connects > before && session !== undefined && session !== first, 'a new session');
        expect(first.destroyed || first.readableEnded).toBe(true);
        session!.write(
          mqttPacket.generate({ cmd: 'publish', topic: 't/d/attrs', payload: 'good', qos: 1, messageId: 1, dup: false, retain: false }),
        );
        await eventually(() => received.length === 1, 'the good message');
        expect(received).toEqual(['good']);
      } finally {
        await sub.close();
      }
    },
  );
});
