// PUT /device/{id}/actuate at its edges (interface.md §4.2, §6.2; decisions.md "Actuation";
// docs/messaging.md §7): an empty `attrs`, a `topic` in the body (ignored, even when it names
// another device's config topic), another tenant's device id, and the message as a device gets
// it: exactly the JSON of `attrs`, QoS 1, not retained (a subscriber arriving later gets nothing).
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';

const tenantA = `acea${crypto.randomBytes(3).toString('hex')}`;
const tenantB = `aceb${crypto.randomBytes(3).toString('hex')}`;
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
let tokenB: string;
let templateA: number;
const clients: mqtt.MqttClient[] = [];

beforeAll(async () => {
  tokenA = await tenantToken(svc.base, svc.token, tenantA);
  tokenB = await tenantToken(svc.base, svc.token, tenantB);
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

describe('the body', () => {
  it('{"attrs": {}}: nothing in it is not configurable, so 200 and the device receives {} on both config topics', async () => {
    const d = await newDeviceOfA();
    const { got } = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    const res = await actuate(d, { attrs: {} });
    expect(res.status).toBe(200);
    expect(res.text).toBe(SENT);
    await eventually(() => got.length >= 2 || undefined, 'both messages');
    await quiet();
    expect(got.map((g) => [g.topic, g.payload.toString('utf8'), g.qos, g.retain]).sort()).toEqual(
      [...topicsOf(tenantA, d)].sort().map((t) => [t, '{}', 1, false]),
    );
  });

  it('{"attrs": {}} on a device without any actuator attribute: 200 too (no label is refused)', async () => {
    const bare = await createTemplate(svc.service.pool, tenantA, 'sensor', [
      { label: 'temperature', type: 'dynamic', value_type: 'float' },
    ]);
    const d = await createDevice(svc.service.pool, tenantA, [bare]);
    const { got } = await subscriber([`${tenantA}:${d}/config`]);
    const res = await actuate(d, { attrs: {} });
    expect([res.status, res.text]).toEqual([200, SENT]);
    await eventually(() => got.length >= 1 || undefined, 'the message');
    expect(got[0]!.payload.toString('utf8')).toBe('{}');
    // while a label is still refused there
    const refused = await actuate(d, { attrs: { temperature: 1 } });
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ status: 'some of the attributes are not configurable', attrs: ['temperature'] });
  });

  it('"topic" is ignored: the message goes to the device\'s own config topics only, not to the topic named', async () => {
    const d = await newDeviceOfA();
    const other = await newDeviceOfA();
    const own = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    const named = await subscriber(['x', '/x', `${tenantA}:${d}/x`, ...topicsOf(tenantA, other)]);
    const sent: string[] = [];
    for (const topic of ['x', `${tenantA}:${other}/config`, `/${tenantA}/${other}/config`]) {
      own.got.length = 0;
      const value = Math.round(Math.random() * 1e6) / 100;
      sent.push(JSON.stringify({ setpoint: value }));
      const res = await actuate(d, { attrs: { setpoint: value }, topic });
      expect([res.status, res.text], topic).toEqual([200, SENT]);
      await eventually(() => own.got.length >= 2 || undefined, `both messages (topic ${topic})`);
      expect(own.got.map((g) => g.topic).sort(), topic).toEqual([...topicsOf(tenantA, d)].sort());
      for (const g of own.got) expect(g.payload.toString('utf8'), topic).toBe(JSON.stringify({ setpoint: value }));
    }
    await quiet();
    // (`x` and `/x` are open to anyone on a shared broker: only this test's messages count.)
    expect(named.got.filter((g) => sent.includes(g.payload.toString('utf8'))).map((g) => g.topic)).toEqual([]);
    expect(named.got.filter((g) => g.topic !== 'x' && g.topic !== '/x')).toEqual([]);
  });

  it('"topic" does not make a bad body good: {"topic": "x"} alone is still 400', async () => {
    const d = await newDeviceOfA();
    const res = await actuate(d, { topic: `${tenantA}:${d}/config` });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      message: 'The body must be a JSON object with an "attrs" object (attribute label to new value)',
      status: 400,
    });
  });
});

describe('tenant isolation', () => {
  it("tenant B actuating tenant A's device id: 404, and A's device receives nothing", async () => {
    const d = await newDeviceOfA();
    const a = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    for (const body of [{ attrs: { setpoint: 1 } }, { attrs: {} }, { attrs: { setpoint: 2 }, topic: `${tenantA}:${d}/config` }]) {
      const res = await actuate(d, body, tokenB);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ message: `No such device: ${d}`, status: 404 });
    }
    await quiet();
    expect(a.got).toEqual([]);
    // The subscription works: A's own actuation is the first thing it sees.
    expect((await actuate(d, { attrs: { mode: 'mine' } })).status).toBe(200);
    await eventually(() => a.got.length >= 2 || undefined, "A's own messages");
    expect(a.got.map((g) => g.payload.toString('utf8'))).toEqual(['{"mode":"mine"}', '{"mode":"mine"}']);
  });

  it("B's own device with the same id gets B's message; A's device of that id gets nothing", async () => {
    const d = await newDeviceOfA();
    const templateB = await createTemplate(svc.service.pool, tenantB, 'thermostat', ATTRS);
    await createDevice(svc.service.pool, tenantB, [templateB], { id: d });
    const a = await subscriber(topicsOf(tenantA, d), { as: `${tenantA}:${d}` });
    const b = await subscriber(topicsOf(tenantB, d), { as: `${tenantB}:${d}` });
    const res = await actuate(d, { attrs: { setpoint: 7 } }, tokenB);
    expect([res.status, res.text]).toEqual([200, SENT]);
    await eventually(() => b.got.length >= 2 || undefined, "B's messages");
    await quiet();
    expect(a.got).toEqual([]);
    expect(b.got.map((g) => g.topic).sort()).toEqual([...topicsOf(tenantB, d)].sort());
  });
});

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
