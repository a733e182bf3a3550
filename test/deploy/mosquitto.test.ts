// deploy/mosquitto: the config, ACL and entrypoint of the compose broker. The file checks
// always run; the live checks start this machine's Mosquitto 2 through the repository's
// entrypoint.sh with the repository's mosquitto.conf, changed only where the container's paths
// and port differ, and are skipped where Mosquitto and its dynamic-security plugin are missing.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import { tempDir } from '../helpers/service.js';
import { commandExists, dynsecPlugin, readRepoFile, repoFile } from './files.js';

const conf = readRepoFile('deploy/mosquitto/mosquitto.conf');
const acl = readRepoFile('deploy/mosquitto/acl');
const confLines = conf.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
const option = (name: string) => confLines.filter((l) => l.split(/\s+/)[0] === name).map((l) => l.slice(name.length).trim()).at(-1);
const aclLines = acl.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));

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
    const serviceGrants = service.slice(0, service.findIndex((l) => l.startsWith('user ')));
    expect(serviceGrants).toEqual(['topic read +/attrs', 'topic read /+/+/attrs', 'topic write +/config', 'topic write /+/+/config']);
    // No grant before the first `user` line other than the patterns: those would apply to anonymous clients.
    const beforeUsers = aclLines.slice(0, aclLines.findIndex((l) => l.startsWith('user ')));
    expect(beforeUsers.every((l) => l.startsWith('pattern '))).toBe(true);
  });
});

const mosquittoReady = commandExists('mosquitto') && commandExists('mosquitto_passwd') && commandExists('mosquitto_ctrl') && dynsecPlugin() !== undefined;

describe.skipIf(!mosquittoReady)('the broker, live (this machine’s mosquitto)', () => {
  let dir: string;
  let port: number;
  let configFile: string;
  let broker: ChildProcess | undefined;
  let brokerOutput = '';
  const clients: MqttClient[] = [];
  const passwords = { MQTT_SERVICE_PASSWORD: 'service-pw-1', MQTT_ADMIN_PASSWORD: 'admin-pw-1' };

  /** The repository config, with the container's paths and listener replaced, nothing else. */
  async function writeConfig(): Promise<void> {
    const replaced: Record<string, string> = {
      listener: `${port} 127.0.0.1`,
      password_file: path.join(dir, 'auth', 'passwd'),
      acl_file: repoFile('deploy/mosquitto/acl'),
      plugin: dynsecPlugin()!,
      plugin_opt_config_file: path.join(dir, 'data', 'dynamic-security.json'),
      persistence_location: path.join(dir, 'data') + '/',
    };
    const seen = new Set<string>();
    const text = conf
      .split('\n')
      .map((line) => {
        const name = line.trim().split(/\s+/)[0]!;
        if (line.trim().startsWith('#') || !(name in replaced)) return line;
        seen.add(name);
        return `${name} ${replaced[name]}`;
      })
      .join('\n');
    expect([...seen].sort()).toEqual(Object.keys(replaced).sort());
    await fs.writeFile(configFile, text);
  }

  async function startBroker(env: Record<string, string>): Promise<void> {
    brokerOutput = '';
    const child = spawn('sh', [repoFile('deploy/mosquitto/entrypoint.sh'), configFile], {
      env: { PATH: process.env.PATH, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    broker = child;
    child.stdout!.on('data', (c: Buffer) => (brokerOutput += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (brokerOutput += c.toString()));
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`mosquitto exited with ${child.exitCode}:\n${brokerOutput}`);
      if (/mosquitto version [\d.]+ running/.test(brokerOutput)) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`mosquitto did not start:\n${brokerOutput}`);
  }

  async function stopBroker(): Promise<void> {
    const child = broker;
    broker = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }

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

  /** What operators run (docs/operations.md): add a device account through the plugin. */
  function addDevice(username: string, password: string): void {
    execFileSync('mosquitto_ctrl', ['-h', '127.0.0.1', '-p', String(port), '-u', 'broker-admin', '-P', passwords.MQTT_ADMIN_PASSWORD, 'dynsec', 'createClient', username, '-p', password], { stdio: 'pipe' });
  }

  function collect(client: MqttClient): string[] {
    const got: string[] = [];
    client.on('message', (topic, payload) => got.push(`${topic} ${payload.toString()}`));
    return got;
  }

  const settle = () => new Promise((r) => setTimeout(r, 300));

  beforeAll(async () => {
    dir = await tempDir('dr-mosquitto-');
    port = await freePort();
    configFile = path.join(dir, 'mosquitto.conf');
    await writeConfig();
    await startBroker(passwords);
    addDevice('t1:abc', 'abc-pw');
    addDevice('t1:xyz', 'xyz-pw');
  });

  afterAll(async () => {
    for (const c of clients) c.end(true);
    await stopBroker();
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
    const first = await connect({ username: 'device-registry', password: passwords.MQTT_SERVICE_PASSWORD, protocolVersion: 5, clientId, clean: false, properties: { sessionExpiryInterval: 3600 } });
    // Its own group: the other tests' service clients are still members of group `g`.
    await first.subscribeAsync('$share/restart/+/attrs', { qos: 1 });
    first.end(true);
    const device = await connect({ username: 't1:abc', password: 'abc-pw' });
    await device.publishAsync('t1:abc/attrs', '{"queued":1}', { qos: 1 });
    device.end(true);
    await settle();

    await stopBroker();
    const old = passwords.MQTT_SERVICE_PASSWORD;
    passwords.MQTT_SERVICE_PASSWORD = 'service-pw-2';
    await startBroker(passwords);

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
    const res = spawnSync('sh', [repoFile('deploy/mosquitto/entrypoint.sh'), configFile], {
      env: { PATH: process.env.PATH, MQTT_ADMIN_PASSWORD: 'x' },
      encoding: 'utf8',
    });
    expect(res.status).toBe(2);
    expect(res.stderr.trim()).toBe('mosquitto entrypoint: MQTT_SERVICE_PASSWORD must be set');
  });
});
