// Shared setup of the actuation tests (test/actuation/): the file's service, a tenant with a
// thermostat template, devices of it, PUT /device/{id}/actuate, and clients of the run's broker
// collecting what arrives on a device's config topics.
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { afterAll, beforeAll, expect } from 'vitest';
import { createDevice, createTemplate, deviceClient } from './registry-fixtures.js';
import { http, tenantToken, useService } from './service.js';

export const ATTRS = [
  { label: 'setpoint', type: 'actuator', value_type: 'float' },
  { label: 'mode', type: 'actuator', value_type: 'string' },
  { label: 'temperature', type: 'dynamic', value_type: 'float' },
];
export const SENT = '{" status":"configuration sent to device"}';
/** How long "nothing arrives" is watched for. */
export const QUIET_MS = 500;

export interface Received {
  topic: string;
  payload: Buffer;
  qos: number;
  retain: boolean;
}

/** A device's two config topics (the current layout and the legacy one). */
export const topicsOf = (tenant: string, id: string) => [`${tenant}:${id}/config`, `/${tenant}/${id}/config`];

export const quiet = () => new Promise((r) => setTimeout(r, QUIET_MS));

/** The file's service and tenant A (a fresh one, its template made in beforeAll). */
export function useActuation() {
  const tenantA = `acea${crypto.randomBytes(3).toString('hex')}`;
  const svc = useService();
  const made = { tokenA: '', templateA: 0 };
  const clients: mqtt.MqttClient[] = [];
  beforeAll(async () => {
    made.tokenA = await tenantToken(svc.base, svc.token, tenantA);
    made.templateA = await createTemplate(svc.service.pool, tenantA, 'thermostat', ATTRS);
  });
  // Registered after useService(): the clients end before the service stops.
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.endAsync().catch(() => undefined)));
  });

  const newDeviceOfA = () => createDevice(svc.service.pool, tenantA, [made.templateA]);
  const actuate = (id: string, body: unknown, token = made.tokenA) => http('PUT', `${svc.base}/device/${id}/actuate`, { token, body });

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

  return { svc, tenantA, clients, tokenA: () => made.tokenA, newDeviceOfA, actuate, subscriber };
}
