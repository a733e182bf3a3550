// The compose wiring without docker: the service with MQTT_URL carrying the broker account
// `device-registry` and MQTT_DYNAMIC_SECURITY, against the broker as deploy/mosquitto configures
// it (repo-mosquitto.ts), with device accounts made the way docs/operations.md tells operators
// to: a credential through the API. A device message
// reaches history through the ACL and the service's shared subscription; an actuation reaches
// the device; what the ACL forbids never reaches the service.
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryRecord } from '../helpers/api.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { mosquittoInstalled, useRepoMosquitto } from './repo-mosquitto.js';

describe.skipIf(!mosquittoInstalled())('service + the compose broker configuration', () => {
  const passwords = {
    MQTT_SERVICE_PASSWORD: crypto.randomBytes(12).toString('hex'),
    MQTT_ADMIN_PASSWORD: crypto.randomBytes(12).toString('hex'),
  };
  const tenant = `dep${crypto.randomBytes(3).toString('hex')}`;
  let token: string;
  let device: string;
  let other: string;
  const clients: mqtt.MqttClient[] = [];

  // The broker starts before the service and is disposed of after it.
  const broker = useRepoMosquitto(passwords);
  const svc = useService(() => ({
    MQTT_URL: broker().url('device-registry', passwords.MQTT_SERVICE_PASSWORD),
    MQTT_SHARE_GROUP: 'device-registry',
    MQTT_SUBSCRIBER_CONNECTIONS: '2',
    MQTT_DYNAMIC_SECURITY: 'true',
  }));

  beforeAll(async () => {
    token = await tenantToken(svc.base, svc.token, tenant, 'admin');
    const template = await createTemplate(svc.service.pool, tenant, 'thermostat', [
      { label: 'temperature', type: 'dynamic', value_type: 'float' },
      { label: 'setpoint', type: 'actuator', value_type: 'float' },
    ]);
    device = await createDevice(svc.service.pool, tenant, [template], { events: svc.service.events });
    other = await createDevice(svc.service.pool, tenant, [template], { events: svc.service.events });
    for (const [id, secret] of [
      [device, 'device-password-1'],
      [other, 'other-password-1'],
    ] as const) {
      const made = await http('POST', `${svc.base}/device/${id}/credentials`, { token, body: { type: 'password', secret } });
      expect(made.status).toBe(201);
    }
  });

  afterAll(() => {
    for (const c of clients) c.end(true);
  });

  const connectAs = async (id: string, password: string, opts: mqtt.IClientOptions = {}) => {
    const client = await deviceClient(broker().url(`${tenant}:${id}`, password), opts);
    clients.push(client);
    return client;
  };

  const history = (id: string) =>
    http<HistoryRecord[]>('GET', `${svc.base}/history/device/${id}/history?attr=temperature&lastN=10`, { token });

  it('stores a device message that went through the broker ACL and the shared subscription', async () => {
    const client = await connectAs(device, 'device-password-1');
    await client.publishAsync(`${tenant}:${device}/attrs`, JSON.stringify({ temperature: 21.5 }), { qos: 1 });
    const rows = await eventually(async () => {
      const res = await history(device);
      return res.status === 200 && res.body.length > 0 ? res.body : undefined;
    }, 'the value in history');
    expect(rows).toEqual([expect.objectContaining({ attr: 'temperature', value: 21.5 })]);
  });

  it('sends an actuation to the device through the broker', async () => {
    const client = await connectAs(device, 'device-password-1');
    const received: string[] = [];
    client.on('message', (topic, payload) => received.push(`${topic} ${payload.toString()}`));
    await client.subscribeAsync(`${tenant}:${device}/config`, { qos: 1 });
    const res = await http('PUT', `${svc.base}/device/${device}/actuate`, { token, body: { attrs: { setpoint: 18 } } });
    expect(res.status).toBe(200);
    await eventually(() => received.length > 0, 'the configuration message');
    expect(received).toEqual([`${tenant}:${device}/config {"setpoint":18}`]);
  });

  it('never receives what a device may not publish: another device’s topic', async () => {
    const before = await historyCount(svc.service.pool, tenant, device);
    // MQTT 5, so that the broker says why in the PUBACK (3.1.1 acknowledges and drops silently).
    const intruder = await connectAs(other, 'other-password-1', { protocolVersion: 5 });
    await expect(intruder.publishAsync(`${tenant}:${device}/attrs`, JSON.stringify({ temperature: -99 }), { qos: 1 })).rejects.toThrow(
      /Not authorized/,
    );
    // Its own topic works, and the pipeline is live.
    await intruder.publishAsync(`${tenant}:${other}/attrs`, JSON.stringify({ temperature: 1 }), { qos: 1 });
    await eventually(async () => (await historyCount(svc.service.pool, tenant, other)) === 1, 'the allowed message in history');
    expect(await historyCount(svc.service.pool, tenant, device)).toBe(before);
  });

  it('refuses a device without an account', async () => {
    await expect(deviceClient(broker().url(`${tenant}:ffffff`, 'guess'))).rejects.toThrow(/Not authorized/);
  });
});
