// A scripted MQTT 3.1.1 broker for the subscriber's tests of what no conforming broker does (a
// resend on a live connection, a malformed frame): it accepts every CONNECT and SUBSCRIBE and
// answers PINGREQ; what it receives and the sessions it opened are the test's to read, and
// frames are written to a session's socket by hand.
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';
import { afterAll, beforeAll } from 'vitest';
import type { AckHandle } from '../../src/broker/link.js';
import { SubscriberConnection } from '../../src/broker/subscriber.js';
import { createLogger } from '../../src/log.js';
import { freePort } from '../../src/net.js';

export interface ScriptedBroker {
  /** `mqtt://127.0.0.1:<port>`, once started. */
  readonly url: string;
  /** The CONNECTs received. */
  readonly connects: number;
  /** The socket of the latest session whose SUBSCRIBE was answered. */
  readonly session: net.Socket | undefined;
  /** Every packet received, in order. */
  readonly received: Packet[];
}

/** A scripted broker for the file's tests (started in beforeAll, closed in afterAll). */
export function useScriptedBroker(): ScriptedBroker {
  let server: net.Server | undefined;
  const state = { url: '', connects: 0, session: undefined as net.Socket | undefined, received: [] as Packet[] };
  beforeAll(async () => {
    server = net.createServer((s) => {
      const parser = mqttPacket.parser({ protocolVersion: 4 });
      parser.on('packet', (p: Packet) => {
        state.received.push(p);
        if (p.cmd === 'connect') {
          state.connects++;
          s.write(mqttPacket.generate({ cmd: 'connack', returnCode: 0, sessionPresent: false }));
        } else if (p.cmd === 'subscribe') {
          s.write(mqttPacket.generate({ cmd: 'suback', messageId: p.messageId!, granted: [1] }));
          state.session = s;
        } else if (p.cmd === 'pingreq') s.write(mqttPacket.generate({ cmd: 'pingresp' }));
      });
      s.on('data', (d: Buffer) => parser.parse(d));
      s.on('error', () => undefined);
    });
    const port = await freePort();
    await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
    state.url = `mqtt://127.0.0.1:${port}`;
  });
  afterAll(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));
  return state;
}

/** A QoS 1 PUBLISH frame. */
export function publishFrame(id: number, topic: string, payload: string, dup = false): Buffer {
  return mqttPacket.generate({ cmd: 'publish', topic, payload, qos: 1, messageId: id, dup, retain: false });
}

/** The service's subscriber connection (MQTT 3.1.1, filter `t/+/attrs`) to the scripted broker; start it. */
export function scriptedSubscriber(broker: ScriptedBroker, clientId: string, onMessage: (payload: Buffer, ack: AckHandle) => void) {
  return new SubscriberConnection({
    url: broker.url,
    clientId,
    version: 4,
    filters: ['t/+/attrs'],
    sessionExpirySeconds: 60,
    receiveMaximum: 100,
    log: createLogger('silent'),
    onMessage: (_topic, payload, ack) => onMessage(payload, ack),
  });
}
