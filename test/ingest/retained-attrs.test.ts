// A device that publishes its telemetry with the retain flag (some firmwares set it on every
// message) to the embedded broker: the value is taken in as any other, and the broker keeps no
// copy of it. No one may subscribe to an attrs topic, so a retained copy could never be read,
// and aedes kept the last message of each topic in memory for good, up to MAX_MESSAGE_BYTES
// each, even after its device was removed: memory outside the bound of docs/operations.md §3
// (found by an audit).
import mqtt from 'mqtt';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { AckHandle } from '../../src/broker/link.js';
import { DeviceAuthorisation } from '../../src/broker/device-auth.js';
import { startEmbeddedBroker, type EmbeddedBroker } from '../../src/broker/embedded.js';
import { createLogger } from '../../src/log.js';
import type { LoginCheck } from '../../src/registry/credentials/logins.js';

/** The registry knows every device (MQTT_DEVICE_AUTH=off asks for no credential). */
const everyDevice: LoginCheck = {
  check: () => Promise.resolve({ ok: true }),
  standing: (logins) => Promise.resolve(logins.map(() => 'holds' as const)),
  settle: () => undefined,
};

const taken: { device: string; payload: string }[] = [];
let broker: EmbeddedBroker;

beforeAll(async () => {
  const log = createLogger('silent');
  const inbox = {
    accept(tenant: string, id: string, payload: Uint8Array, ack: AckHandle) {
      taken.push({ device: `${tenant}:${id}`, payload: Buffer.from(payload).toString() });
      ack.ack();
    },
    refuse() {},
  };
  const auth = new DeviceAuthorisation(everyDevice, 'off', inbox, log);
  broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, log, hooks: auth.hooks() });
});
afterAll(() => broker?.close());

/** Every retained message the broker holds. */
async function retained(): Promise<string[]> {
  // aedes's `persistence` is not in its typed API.
  const { persistence } = broker.aedes as unknown as {
    persistence: { createRetainedStream(pattern: string): AsyncIterable<{ topic: string }> };
  };
  const topics: string[] = [];
  for await (const p of persistence.createRetainedStream('#')) topics.push(p.topic);
  return topics;
}

it('a retained attrs message is taken in, and the broker keeps no copy of it', async () => {
  const device = await mqtt.connectAsync(`mqtt://127.0.0.1:${broker.port}`, {
    username: 'acme:dev1',
    protocolVersion: 4,
    reconnectPeriod: 0,
  });
  try {
    await device.publishAsync('acme:dev1/attrs', JSON.stringify({ temperature: 1 }), { qos: 1, retain: true });
    await device.publishAsync('/acme/dev1/attrs', JSON.stringify({ temperature: 2 }), { qos: 0, retain: true });
    await device.publishAsync('acme:dev1/attrs', JSON.stringify({ temperature: 3 }), { qos: 2, retain: true });
  } finally {
    await device.endAsync();
  }
  await expect.poll(() => taken.length).toBe(3);
  expect(taken).toEqual([
    { device: 'acme:dev1', payload: '{"temperature":1}' },
    { device: 'acme:dev1', payload: '{"temperature":2}' },
    { device: 'acme:dev1', payload: '{"temperature":3}' },
  ]);
  expect(await retained()).toEqual([]);
});
