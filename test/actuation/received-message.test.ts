// PUT /device/{id}/actuate, the message as a device gets it (interface.md §6.2;
// docs/messaging.md §7): exactly the JSON of `attrs`, QoS 1, not retained (a subscriber
// arriving later gets nothing).
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';

const tenantA = `acea${crypto.randomBytes(3).toString('hex')}`;
const ATTRS = [
  { label: 'setpoint', type: 'actuator', value_type: 'float' },
  { label: 'mode', type: 'actuator', value_type: 'string' },
  { label: 'temperature', type: 'dynamic', value_type: 'float' },
];
const SENT = '{" status":"configuration sent to device"}';
/** How long "nothing arrives" is watched for. */
const QUIET_MS = 500;

interface Received {
  topic: string;
  payload: Buffer;
  qos: number;
  retain: boolean;
}

const svc = useService();
let tokenA: string;
let templateA: number;
const clients: mqtt.MqttClient[] = [];

beforeAll(async () => {
  tokenA = await tenantToken(svc.base, svc.token, tenantA);
  templateA = await createTemplate(svc.service.pool, tenantA, 'thermostat', ATTRS);
});
// Registered after useService(): the clients end before the service stops.
afterAll(async () => {
  await Promise.all(clients.map((c) => c.endAsync().catch(() => undefined)));
});

const newDeviceOfA = () => createDevice(svc.service.pool, tenantA, [templateA]);
const topicsOf = (tenant: string, id: string) => [`${tenant}:${id}/config`, `/${tenant}/${id}/config`];

const actuate = (id: string, body: unknown, token = tokenA) => http('PUT', `${svc.base}/device/${id}/actuate`, { token, body });

/** A client of the run's broker (as device `tenant:id` when given) collecting what arrives on `topics`. */
async function subscriber(
  topics: string[],
  opts: { as?: string; qos?: 0 | 1 | 2 } = {},
): Promise<{ client: mqtt.MqttClient; got: Received[] }> {
  const client = await deviceClient(svc.env.MQTT_URL!, opts.as ? { username: opts.as } : {});
  clients.push(client);
  const got: Received[] = [];
  client.on('message', (topic, payload, packet) => got.push({ topic, payload, qos: packet.qos, retain: packet.retain }));
  const granted = await client.subscribeAsync(topics, { qos: opts.qos ?? 1 });
  expect(granted.map((g) => g.qos)).toEqual(topics.map(() => opts.qos ?? 1));
  return { client, got };
}

const quiet = () => new Promise((r) => setTimeout(r, QUIET_MS));

describe('the message as the device receives it', () => {
  it('exactly the JSON of attrs (order, unicode, nested values, numbers), QoS 1 even for a QoS 2 subscription', async () => {
    const d = await newDeviceOfA();
    // The 403 check looks at labels only: an actuator's value is sent as given.
    const attrs = { mode: { level: 'héllo ☃ "q"', list: [1, null, true] }, setpoint: 0.30000000000000004 };
    const { got } = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}`, qos: 2 });
    const res = await http('PUT', `${svc.base}/device/${d}/actuate`, {
      token: tokenA,
      rawBody: '{ "attrs" : { "mode" : {"level":"h\\u00e9llo ☃ \\"q\\"", "list":[1, null, true]}, "setpoint": 0.30000000000000004 } }',
      headers: { 'content-type': 'application/json' },
    });
    expect([res.status, res.text]).toEqual([200, SENT]);
    await eventually(() => got.length >= 2 || undefined, 'both messages');
    for (const g of got) {
      expect(g.payload.toString('utf8')).toBe(JSON.stringify(attrs));
      expect(g.payload.equals(Buffer.from(JSON.stringify(attrs), 'utf8'))).toBe(true);
      expect(g.qos).toBe(1);
      expect(g.retain).toBe(false);
    }
  });

  it('not retained: a subscriber that connects after the publish receives nothing', async () => {
    const d = await newDeviceOfA();
    const live = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    expect((await actuate(d, { attrs: { setpoint: 3 } })).status).toBe(200);
    await eventually(() => live.got.length >= 2 || undefined, 'the live messages');
    expect(live.got.map((g) => g.retain)).toEqual([false, false]);

    // The control: this broker does keep a retained message for a later subscriber.
    const control = `${tenantA}:${d}/retained-control`;
    const publisher = await deviceClient(svc.env.MQTT_URL!);
    clients.push(publisher);
    await publisher.publishAsync(control, 'kept', { qos: 1, retain: true });
    try {
      const late = await subscriber([...topicsOf(tenantA, d), control], { as: `${tenantA}:${d}` });
      await eventually(() => late.got.some((g) => g.topic === control) || undefined, 'the retained control message');
      await quiet();
      expect(late.got.map((g) => [g.topic, g.payload.toString('utf8'), g.retain])).toEqual([[control, 'kept', true]]);
    } finally {
      // An empty retained payload clears it (the machine's Mosquitto persists retained messages).
      await publisher.publishAsync(control, '', { qos: 1, retain: true });
    }
  });
});
