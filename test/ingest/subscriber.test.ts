// The ingest subscriber connection against a real broker (aedes, in this process, so the test
// can watch which acknowledgements reach it and in what order).
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Aedes } from 'aedes';
import mqtt from 'mqtt';
import { SubscriberConnection } from '../../src/broker/subscriber.js';
import { createLogger } from '../../src/log.js';
import { freePort } from '../../src/net.js';
import { eventually } from '../helpers/registry-fixtures.js';

describe('the ingest subscriber connection', () => {
  let broker: Aedes;
  let server: net.Server;
  let url: string;
  /** Payloads of the messages whose PUBACK reached the broker, in arrival order. */
  const acked: string[] = [];

  beforeAll(async () => {
    broker = await Aedes.createBroker();
    broker.on('ack', (packet, client) => {
      if (client?.id === 'ordered-acks' && packet && 'payload' in packet) acked.push(String(packet.payload));
    });
    server = net.createServer(broker.handle);
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    url = `mqtt://127.0.0.1:${port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => broker.close(() => server.close(() => resolve())));
  });

  it('sends PUBACKs in arrival order: a message acknowledged early waits for the older ones', async () => {
    const received: Array<{ payload: string; ack: () => void }> = [];
    const sub = new SubscriberConnection({
      url,
      clientId: 'ordered-acks',
      version: 4,
      filters: ['ordered/+/attrs'],
      sessionExpirySeconds: 60,
      receiveMaximum: 100,
      log: createLogger('silent'),
      onMessage(_topic, payload, handle) {
        received.push({ payload: payload.toString(), ack: () => handle.ack() });
      },
    });
    await sub.start();
    const pub = await mqtt.connectAsync(url, { clientId: 'ordered-publisher' });
    try {
      for (const n of ['1', '2', '3', '4']) await pub.publishAsync('ordered/dev/attrs', n, { qos: 1 });
      await eventually(() => received.length === 4, 'four messages delivered');
      expect(received.map((m) => m.payload)).toEqual(['1', '2', '3', '4']);

      received[2]!.ack();
      received[1]!.ack();
      await new Promise((r) => setTimeout(r, 300));
      expect(acked).toEqual([]); // 2 and 3 wait for 1

      received[0]!.ack();
      await eventually(() => acked.length === 3, 'three PUBACKs');
      expect(acked).toEqual(['1', '2', '3']);

      received[3]!.ack();
      received[3]!.ack(); // a second ack of the same message sends nothing more
      await eventually(() => acked.length === 4, 'the fourth PUBACK');
      await new Promise((r) => setTimeout(r, 100));
      expect(acked).toEqual(['1', '2', '3', '4']);
    } finally {
      await pub.endAsync();
      await sub.close();
    }
  });
});
