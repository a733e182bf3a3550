// Point 5 of issue 19: an ack only ever acknowledges the message it was made for. A broker may
// reuse a packet id as soon as it was acknowledged; had a second copy of a message been sent on
// the live connection (MQTT forbids it, a faulty broker might), that copy's handle, used later,
// must not PUBACK the new message that now has the id, before that one is committed.
// The broker here is scripted (mqtt-packet over TCP), since no conforming broker resends on a
// live connection; the subscriber is the real one.
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AckHandle } from '../../src/broker/link.js';
import { SubscriberConnection } from '../../src/broker/subscriber.js';
import { createLogger } from '../../src/log.js';
import { freePort } from '../../src/net.js';
import { eventually } from '../helpers/registry-fixtures.js';

describe('the ingest subscriber with a broker that resends on a live connection', () => {
  let server: net.Server;
  let url: string;
  let socket: net.Socket | undefined;
  /** Packet ids of the PUBACKs that reached the broker, in order. */
  const pubacks: number[] = [];

  beforeAll(async () => {
    server = net.createServer((s) => {
      socket = s;
      const parser = mqttPacket.parser({ protocolVersion: 4 });
      parser.on('packet', (p: Packet) => {
        if (p.cmd === 'connect') s.write(mqttPacket.generate({ cmd: 'connack', returnCode: 0, sessionPresent: false }));
        else if (p.cmd === 'subscribe') s.write(mqttPacket.generate({ cmd: 'suback', messageId: p.messageId!, granted: [1] }));
        else if (p.cmd === 'puback') pubacks.push(p.messageId!);
        else if (p.cmd === 'pingreq') s.write(mqttPacket.generate({ cmd: 'pingresp' }));
      });
      s.on('data', (d: Buffer) => parser.parse(d));
      s.on('error', () => undefined);
    });
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    url = `mqtt://127.0.0.1:${port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const publish = (id: number, payload: string, dup = false) =>
    socket!.write(mqttPacket.generate({ cmd: 'publish', topic: 't/d/attrs', payload, qos: 1, messageId: id, dup, retain: false }));

  it('a stale handle of a reused packet id sends no PUBACK; the message that has the id now is acknowledged by its own', async () => {
    const received: Array<{ payload: string; ack: AckHandle }> = [];
    const sub = new SubscriberConnection({
      url,
      clientId: 'ack-identity',
      version: 4,
      filters: ['t/+/attrs'],
      sessionExpirySeconds: 60,
      receiveMaximum: 100,
      log: createLogger('silent'),
      onMessage(_topic, payload, ack) {
        received.push({ payload: payload.toString(), ack });
      },
    });
    await sub.start();
    try {
      publish(7, 'A');
      publish(7, 'A', true); // sent again while in flight
      await eventually(() => received.length === 2, 'both copies');
      received[0]!.ack.ack(); // A committed
      await eventually(() => pubacks.length === 1, 'the PUBACK of A');
      expect(pubacks).toEqual([7]);

      publish(7, 'B'); // the id, reused for a new message
      await eventually(() => received.length === 3, 'B');
      received[1]!.ack.ack(); // the second copy of A, committed later
      await new Promise((r) => setTimeout(r, 300));
      expect(pubacks).toEqual([7]); // B is not committed: no PUBACK for it yet

      received[2]!.ack.ack(); // B committed
      await eventually(() => pubacks.length === 2, 'the PUBACK of B');
      expect(pubacks).toEqual([7, 7]);
    } finally {
      await sub.close();
    }
  });
});
