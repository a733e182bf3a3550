// PUT /device/{id}/actuate, tenant isolation (interface.md §4.2; decisions.md "Actuation"):
// another tenant's device id is unknown (404, nothing sent), and the same id in two tenants
// names two devices, each receiving only its own tenant's message.
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
