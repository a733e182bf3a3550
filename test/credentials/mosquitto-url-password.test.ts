// MQTT_URL's password is a URL's: percent-encoded, any character allowed. Every connection of
// the service to the broker (ingest subscribers, actuation publisher, dynamic-security client,
// session drain) logs in with the same decoded password, against the shipped Mosquitto
// (test/deploy/repo-mosquitto.ts).
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { afterAll, describe, expect, it } from 'vitest';
import { useService } from '../helpers/service.js';
import { eventually, historyCount } from '../helpers/registry-fixtures.js';
import { mosquittoInstalled, useRepoMosquitto } from '../deploy/repo-mosquitto.js';
import { connect, newCredential, newDevice, newTenant } from './fixtures.js';

describe.skipIf(!mosquittoInstalled())('MQTT_URL with a password holding URL delimiters', () => {
  // ':' once decoded used to split the publisher's login at the wrong place (user name
  // `device-registry:pa`), so the broker refused it and the start failed.
  const passwords = {
    MQTT_SERVICE_PASSWORD: `pa:ss@w/rd#?%${crypto.randomBytes(6).toString('hex')}`,
    MQTT_ADMIN_PASSWORD: crypto.randomBytes(12).toString('hex'),
  };
  const broker = useRepoMosquitto(passwords);
  const clients: mqtt.MqttClient[] = [];
  const svc = useService(() => ({
    // broker().url() percent-encodes the password.
    MQTT_URL: broker().url('device-registry', passwords.MQTT_SERVICE_PASSWORD),
    MQTT_SUBSCRIBER_CONNECTIONS: '2',
    MQTT_DYNAMIC_SECURITY: 'true',
    MQTT_DEVICE_AUTH: 'required',
  }));
  afterAll(() => {
    for (const c of clients) c.end(true);
  });

  it('the service starts, a credential becomes a broker account, and the device publishes', async () => {
    const t = await newTenant(svc, 'urlpw');
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const c = await connect(`mqtt://127.0.0.1:${broker().port}`, { username: `${t.name}:${d}`, password: cred.secret, protocolVersion: 5 });
    clients.push(c);
    await c.publishAsync(`${t.name}:${d}/attrs`, JSON.stringify({ temperature: 20.5 }), { qos: 1 });
    await eventually(async () => (await historyCount(svc.service.pool, t.name, d)) === 1 || undefined, 'the value stored');
    expect(await historyCount(svc.service.pool, t.name, d)).toBe(1);
  });
});
