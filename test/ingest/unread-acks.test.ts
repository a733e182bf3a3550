// A device that publishes QoS 1 without ever reading its socket (found by an audit). aedes
// writes a PUBACK without looking at the socket's backpressure (mqtt-packet reports every
// acknowledgement as written), so it went on reading and acknowledging: once the kernel's
// buffers were full, every further PUBACK waited in the service's memory for as long as the
// connection lived (measured: +180 MB for 1.4 M messages from one connection, kept after the
// flood). The embedded broker now stops reading a connection whose acknowledgements are not
// being read, and closes it after aedes's drain timeout.
import crypto from 'node:crypto';
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers/service.js';
import { createDevice, createTemplate } from '../helpers/registry-fixtures.js';
import { metricOf } from '../helpers/faults.js';

/** More PUBACKs than the kernel's socket buffers hold (Linux: tcp_wmem up to 4 MiB, 4 bytes each). */
const MESSAGES = 2_000_000;

describe('a device that never reads its PUBACKs', () => {
  let svc: TestService;
  const tenant = `ua${crypto.randomBytes(3).toString('hex')}`;
  let device: string;

  beforeAll(async () => {
    svc = await startTestService({ MQTT_URL: undefined });
    const t = await createTemplate(svc.service.pool, tenant, 't', [{ label: 'seq', type: 'dynamic', value_type: 'integer' }]);
    device = await createDevice(svc.service.pool, tenant, [t]);
  });
  afterAll(() => svc?.stop());

  it('is read no further once its acknowledgements wait unread', async () => {
    const socket = net.connect(svc.service.mqttPort!, '127.0.0.1');
    try {
      await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
      const connack = new Promise<void>((resolve) => socket.once('data', () => resolve()));
      socket.write(
        mqttPacket.generate({
          cmd: 'connect',
          protocolId: 'MQTT',
          protocolVersion: 4,
          clean: true,
          clientId: `ua-${device}`,
          keepalive: 0,
          username: `${tenant}:${device}`,
        }),
      );
      await connack;
      socket.pause(); // from now on nothing is read: the PUBACKs stay unread
      const received = await metricOf(svc.base, 'ingest_messages_received_total');
      // Not JSON: each message is dropped and acknowledged at once, so the flood is quick.
      const publish = (id: number) =>
        mqttPacket.generate({
          cmd: 'publish',
          topic: `${tenant}:${device}/attrs`,
          payload: 'x',
          qos: 1,
          dup: false,
          retain: false,
          messageId: id,
        });
      const sent = await new Promise<number>((resolve) => {
        let n = 0;
        let stalled: NodeJS.Timeout | undefined;
        const pump = () => {
          clearTimeout(stalled);
          while (n < MESSAGES) {
            if (!socket.write(publish((n++ % 65535) + 1))) {
              // The service stopped reading: the writes wait. 3 s without a drain ends the flood.
              stalled = setTimeout(() => resolve(n), 3000);
              socket.once('drain', pump);
              return;
            }
          }
          resolve(n);
        };
        pump();
      });
      const taken = (await metricOf(svc.base, 'ingest_messages_received_total')) - received;
      // Before: all 2,000,000 sent and taken in, their PUBACKs queued in the service's memory.
      expect(sent).toBeLessThan(MESSAGES);
      expect(taken).toBeLessThan(MESSAGES);
    } finally {
      socket.destroy();
    }
  }, 180_000);
});
