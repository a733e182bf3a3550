// deploy/mosquitto: the config, ACL and entrypoint of the compose broker. The file checks
// always run; the live checks start this machine's Mosquitto 2 as the compose stack would
// (repo-mosquitto.ts) and are skipped where Mosquitto and its dynamic-security plugin are missing.
import { spawnSync } from 'node:child_process';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRepoFile, repoFile } from './files.js';
import { mosquittoInstalled, RepoMosquitto } from './repo-mosquitto.js';

const conf = readRepoFile('deploy/mosquitto/mosquitto.conf');
const acl = readRepoFile('deploy/mosquitto/acl');
const confLines = conf
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));
const option = (name: string) =>
  confLines
    .filter((l) => l.split(/\s+/)[0] === name)
    .map((l) => l.slice(name.length).trim())
    .at(-1);
const aclLines = acl
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));

describe('mosquitto.conf and acl', () => {
  it('lets nobody in anonymously and keeps sessions and queues across restarts', () => {
    expect(option('allow_anonymous')).toBe('false');
    expect(option('persistence')).toBe('true');
    expect(option('persistence_location')).toBe('/mosquitto/data/');
    expect(option('acl_file')).toBe('/mosquitto/config/acl');
    expect(option('password_file')).toBeDefined();
    expect(option('plugin')).toMatch(/mosquitto_dynamic_security\.so$/);
    expect(option('plugin_opt_config_file')).toMatch(/^\/mosquitto\/data\//);
  });

  it('raises the in-flight and queue limits far above the defaults (20 / 1000)', () => {
    expect(Number(option('max_inflight_messages'))).toBeGreaterThanOrEqual(1000);
    expect(Number(option('max_queued_messages'))).toBeGreaterThanOrEqual(100_000);
  });

  it('gives devices their own topics and the service the wildcard topics', () => {
    expect(aclLines).toEqual(expect.arrayContaining(['pattern write %u/attrs', 'pattern read %u/config']));
    const service = aclLines.slice(aclLines.indexOf('user device-registry') + 1);
    const serviceGrants = service.slice(
      0,
      service.findIndex((l) => l.startsWith('user ')),
    );
    expect(serviceGrants).toEqual([
      'topic read +/attrs',
      'topic read /+/+/attrs',
      'topic write +/config',
      'topic write /+/+/config',
      // MQTT_DYNAMIC_SECURITY: the device accounts follow the registry's credentials.
      'topic readwrite $CONTROL/dynamic-security/#',
    ]);
    // No grant before the first `user` line other than the patterns: those would apply to anonymous clients.
    const beforeUsers = aclLines.slice(
      0,
      aclLines.findIndex((l) => l.startsWith('user ')),
    );
    expect(beforeUsers.every((l) => l.startsWith('pattern '))).toBe(true);
  });
});

describe.skipIf(!mosquittoInstalled())('the broker, live (this machine’s mosquitto)', () => {
  let broker: RepoMosquitto;
  let port: number;
  const clients: MqttClient[] = [];
  const passwords = { MQTT_SERVICE_PASSWORD: 'service-pw-1', MQTT_ADMIN_PASSWORD: 'admin-pw-1' };

  function connect(opts: IClientOptions): Promise<MqttClient> {
    return new Promise((resolve, reject) => {
      const client = mqtt.connect(`mqtt://127.0.0.1:${port}`, { reconnectPeriod: 0, connectTimeout: 5000, ...opts });
      clients.push(client);
      client.once('connect', () => resolve(client));
      client.once('error', (err) => {
        client.end(true);
        reject(err);
      });
    });
  }

  const service = (clientId = `svc-${Math.random().toString(16).slice(2)}`) =>
    connect({ username: 'device-registry', password: passwords.MQTT_SERVICE_PASSWORD, protocolVersion: 5, clientId });

  function collect(client: MqttClient): string[] {
    const got: string[] = [];
    client.on('message', (topic, payload) => got.push(`${topic} ${payload.toString()}`));
    return got;
  }

  const settle = () => new Promise((r) => setTimeout(r, 300));

  beforeAll(async () => {
    broker = await RepoMosquitto.create(passwords);
    port = broker.port;
    await broker.start();
    broker.addDevice('t1:abc', 'abc-pw');
    broker.addDevice('t1:xyz', 'xyz-pw');
  });

  afterAll(async () => {
    for (const c of clients) c.end(true);
    await broker?.dispose();
  });

  it('refuses anonymous clients and wrong passwords', async () => {
    await expect(connect({})).rejects.toThrow(/Not authorized/);
    await expect(connect({ username: 't1:abc', password: 'wrong' })).rejects.toThrow(/Not authorized/);
    await expect(connect({ username: 'device-registry', password: 'wrong' })).rejects.toThrow(/Not authorized/);
  });

  it('delivers a device message to the service’s shared subscription, and to no other device', async () => {
    const svc = await service();
    const toService = collect(svc);
    await svc.subscribeAsync(['$share/g/+/attrs', '$share/g//+/+/attrs'], { qos: 1 });
    const other = await connect({ username: 't1:xyz', password: 'xyz-pw' });
    const toOther = collect(other);
    await other.subscribeAsync(['t1:abc/attrs', '+/attrs', '#'], { qos: 1 });

    const device = await connect({ username: 't1:abc', password: 'abc-pw' });
    await device.publishAsync('t1:abc/attrs', '{"temperature":21}', { qos: 1 });
    // Not its topic: dropped by the broker.
    await device.publishAsync('t1:xyz/attrs', '{"spoofed":true}', { qos: 1 });
    await settle();

    expect(toService).toEqual(['t1:abc/attrs {"temperature":21}']);
    expect(toOther).toEqual([]);
  });

  it('delivers configuration messages from the service to their device only', async () => {
    const device = await connect({ username: 't1:abc', password: 'abc-pw' });
    const toDevice = collect(device);
    await device.subscribeAsync(['t1:abc/config', 't1:xyz/config'], { qos: 1 });
    const svc = await service();
    await svc.publishAsync('t1:abc/config', '{"led":"on"}', { qos: 1 });
    await svc.publishAsync('t1:xyz/config', '{"led":"off"}', { qos: 1 });
    // A device may not send configuration messages.
    const other = await connect({ username: 't1:xyz', password: 'xyz-pw' });
    await other.publishAsync('t1:abc/config', '{"led":"blink"}', { qos: 1 });
    await settle();
    expect(toDevice).toEqual(['t1:abc/config {"led":"on"}']);
  });

  it('keeps device accounts and queued messages across a restart; a changed service password takes effect', async () => {
    // A persistent service session with a subscription, offline while a device publishes.
    const clientId = 'svc-persistent';
    const first = await connect({
      username: 'device-registry',
      password: passwords.MQTT_SERVICE_PASSWORD,
      protocolVersion: 5,
      clientId,
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
    });
    // Its own group: the other tests' service clients are still members of group `g`.
    await first.subscribeAsync('$share/restart/+/attrs', { qos: 1 });
    first.end(true);
    const device = await connect({ username: 't1:abc', password: 'abc-pw' });
    await device.publishAsync('t1:abc/attrs', '{"queued":1}', { qos: 1 });
    device.end(true);
    await settle();

    await broker.stop();
    const old = passwords.MQTT_SERVICE_PASSWORD;
    passwords.MQTT_SERVICE_PASSWORD = 'service-pw-2';
    await broker.start();

    await expect(connect({ username: 'device-registry', password: old })).rejects.toThrow(/Not authorized/);
    await connect({ username: 't1:abc', password: 'abc-pw' });
    const received: string[] = [];
    const again = await new Promise<MqttClient>((resolve, reject) => {
      const c = mqtt.connect(`mqtt://127.0.0.1:${port}`, {
        reconnectPeriod: 0,
        username: 'device-registry',
        password: passwords.MQTT_SERVICE_PASSWORD,
        protocolVersion: 5,
        clientId,
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
      });
      clients.push(c);
      c.on('message', (topic, payload) => received.push(`${topic} ${payload.toString()}`));
      c.once('connect', () => resolve(c));
      c.once('error', reject);
    });
    await settle();
    expect(again.connected).toBe(true);
    expect(received).toEqual(['t1:abc/attrs {"queued":1}']);
  });

  it('the entrypoint refuses to start without the passwords', () => {
    const res = spawnSync('sh', [repoFile('deploy/mosquitto/entrypoint.sh'), broker.configFile], {
      env: { PATH: process.env.PATH, MQTT_ADMIN_PASSWORD: 'x' },
      encoding: 'utf8',
    });
    expect(res.status).toBe(2);
    expect(res.stderr.trim()).toBe('mosquitto entrypoint: MQTT_SERVICE_PASSWORD must be set');
  });
});
