// docker-compose.yml: accepted by `docker compose config` (when a compose CLI is installed;
// no engine is needed for it), wired to what the service reads, secrets only from the
// environment, start order by health.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { readConfig } from '../../src/config.js';
import { projectRoot } from '../../src/paths.js';
import { tempDir } from '../helpers/service.js';
import {
  composeCli,
  interpolate,
  interpolatedNames,
  parseEnvFile,
  readRepoFile,
  repoFile,
  yamlBlock,
  yamlList,
  yamlMapping,
} from './files.js';

const compose = readRepoFile('docker-compose.yml');
const envExample = parseEnvFile(readRepoFile('.env.example'));

const SECRETS = [
  'POSTGRES_PASSWORD',
  'MQTT_SERVICE_PASSWORD',
  'MQTT_ADMIN_PASSWORD',
  'ADMIN_PASSWORD',
  'PSK_ENCRYPTION_KEY',
  'JWT_SECRET',
  'GRAFANA_ADMIN_PASSWORD',
];
/** Values a user would put into .env. */
const sampleSecrets: Record<string, string> = {
  POSTGRES_PASSWORD: 'a1'.repeat(12),
  MQTT_SERVICE_PASSWORD: 'b2'.repeat(12),
  MQTT_ADMIN_PASSWORD: 'c3'.repeat(12),
  ADMIN_PASSWORD: 'd4'.repeat(12),
  PSK_ENCRYPTION_KEY: 'e5'.repeat(32),
  JWT_SECRET: 'f6'.repeat(32),
  GRAFANA_ADMIN_PASSWORD: '07'.repeat(12),
};
const serviceEnv = () => yamlMapping(yamlBlock(compose, ['services', 'device-registry', 'environment']));

const cli = composeCli();

function runCompose(args: string[], env: Record<string, string>) {
  return spawnSync(cli![0]!, [...cli!.slice(1), ...args], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('docker compose config', () => {
  it.skipIf(!cli)('accepts docker-compose.yml with .env.example and the secrets filled in', () => {
    const res = runCompose(['--env-file', repoFile('.env.example'), 'config', '-q'], sampleSecrets);
    expect(res.stderr + res.stdout).toBe('');
    expect(res.status).toBe(0);
  });

  it.skipIf(!cli)('refuses to go on while a secret is missing, naming it', async () => {
    const empty = path.join(await tempDir(), 'empty.env');
    await fs.writeFile(empty, '');
    const { JWT_SECRET: _, ...withoutJwt } = sampleSecrets;
    const res = runCompose(['--env-file', empty, 'config', '-q'], withoutJwt);
    expect(res.status).not.toBe(0);
    expect(res.stderr).toContain('set JWT_SECRET in .env');
  });
});

describe('docker-compose.yml', () => {
  it('takes every interpolated variable from .env.example, which commits no secret', () => {
    const used = interpolatedNames(compose);
    expect([...used].sort()).toEqual(Object.keys(envExample).sort());
    for (const name of SECRETS) {
      expect(used.has(name)).toBe(true);
      expect(envExample[name], `${name} must stay empty in .env.example`).toBe('');
      // Required: compose stops with a message when it is unset or empty.
      expect(compose).toMatch(new RegExp(`\\$\\{${name}:\\?[^}]+\\}`));
    }
  });

  it('passes the service only variables that src/config.ts reads, and they form a valid configuration', () => {
    const vars = { ...envExample, ...sampleSecrets };
    const env = Object.fromEntries(Object.entries(serviceEnv()).map(([k, v]) => [k, interpolate(v, vars)]));
    const read = new Set<string>();
    const recording = new Proxy(env, {
      get(target, key: string) {
        read.add(key);
        return target[key];
      },
    });
    const config = readConfig(recording);
    for (const name of Object.keys(env)) expect(read.has(name), `src/config.ts does not read ${name}`).toBe(true);

    expect(new URL(config.databaseUrl!).host).toBe('timescaledb:5432');
    const mqtt = new URL(config.mqttUrl!);
    expect(mqtt.host).toBe('mosquitto:1883');
    expect(mqtt.username).toBe('device-registry');
    expect(mqtt.password).toBe(sampleSecrets.MQTT_SERVICE_PASSWORD);
    expect(config.pskEncryptionKey).toEqual(Buffer.from(sampleSecrets.PSK_ENCRYPTION_KEY!, 'hex'));
    expect(config.adminPassword).toBe(sampleSecrets.ADMIN_PASSWORD);
    expect(config.jwtSecret).toBeDefined();
    expect(config.historyRetentionDays).toBeUndefined();
    // The internal API listens on the container's interfaces but is not published on the host.
    expect(config.internalHost).toBe('0.0.0.0');
    const ports = yamlList(yamlBlock(compose, ['services', 'device-registry', 'ports']));
    expect(ports.map((p) => interpolate(p, vars))).toEqual(['8000:8000']);
  });

  it("the optional values .env.example shows, and the compose file's fallbacks, are the service's own defaults", () => {
    // .env.example says "optional (defaults shown)": a value there that differed from the
    // service's default would change a deployment that only copied the file.
    const vars = { ...envExample, ...sampleSecrets };
    const env = Object.fromEntries(Object.entries(serviceEnv()).map(([k, v]) => [k, interpolate(v, vars)]));
    const optional = Object.entries(serviceEnv()).flatMap(([k, v]) => {
      const m = /^\$\{([A-Z0-9_]+):-([^}]*)\}$/.exec(v);
      return m ? [{ variable: k, name: m[1]!, fallback: m[2]! }] : [];
    });
    expect(optional.length).toBeGreaterThan(15);
    const unset = { ...env };
    for (const { variable } of optional) delete unset[variable];
    // LOG_FORMAT's own default depends on a terminal, which a container has not: json there.
    const defaults = { ...readConfig(unset), logFormat: 'json' };
    for (const { variable, name, fallback } of optional) {
      expect(envExample[name], `.env.example ${name}`).toBe(fallback);
      const config = readConfig({ ...unset, [variable]: fallback });
      expect(variable === 'LOG_FORMAT' ? config : { ...config, logFormat: 'json' }, `${variable}=${fallback}`).toEqual(defaults);
    }
  });

  it('runs TimescaleDB (PostgreSQL 16 or 17) on a named volume, with a pg_isready health check', () => {
    const db = yamlMapping(yamlBlock(compose, ['services', 'timescaledb']));
    expect(db.image).toMatch(/^timescale\/timescaledb:.*pg1[67]/);
    const volumes = yamlList(yamlBlock(compose, ['services', 'timescaledb', 'volumes']));
    expect(volumes).toContain('timescaledb-data:/var/lib/postgresql/data');
    expect(Object.keys(yamlMapping(yamlBlock(compose, ['volumes'])))).toContain('timescaledb-data');
    expect(yamlMapping(yamlBlock(compose, ['services', 'timescaledb', 'healthcheck'])).test).toContain('pg_isready');
    expect(yamlBlock(compose, ['services', 'timescaledb']).join('\n')).not.toMatch(/^\s*ports:/m);
  });

  it('runs Mosquitto 2 from the repository config, through its entrypoint, with a health check', async () => {
    const broker = yamlMapping(yamlBlock(compose, ['services', 'mosquitto']));
    expect(broker.image).toBe('eclipse-mosquitto:2');
    const volumes = yamlList(yamlBlock(compose, ['services', 'mosquitto', 'volumes']));
    expect(volumes).toContain('./deploy/mosquitto:/mosquitto/config:ro');
    expect(volumes).toContain('mosquitto-data:/mosquitto/data');
    // Every container path it names under /mosquitto/config is a file of deploy/mosquitto.
    const mounted = [...compose.matchAll(/\/mosquitto\/config\/([\w.-]+)/g)].map((m) => m[1]!);
    expect(mounted).toEqual(expect.arrayContaining(['entrypoint.sh', 'mosquitto.conf']));
    for (const file of mounted) await fs.access(repoFile('deploy/mosquitto', file));
    expect(broker.entrypoint).toContain('/mosquitto/config/entrypoint.sh');
    const parsed = parseYaml(compose) as { services: { mosquitto: { healthcheck: { test: string[] } } } };
    const [kind, shell] = parsed.services.mosquitto.healthcheck.test;
    expect(kind).toBe('CMD-SHELL');
    expect(shell).toMatch(/^mosquitto_sub .*-u broker-admin /);
    // `$$` reaches the container as `$`: the password from its environment, the literal $SYS topic.
    expect(interpolate(shell!, {})).toContain(`-P "$MQTT_ADMIN_PASSWORD"`);
    expect(interpolate(shell!, {})).toContain(`-t '$SYS/broker/uptime'`);
  });

  it('starts the service after the database and the broker are healthy', () => {
    const deps = yamlBlock(compose, ['services', 'device-registry', 'depends_on']);
    for (const dep of ['timescaledb', 'mosquitto']) {
      expect(yamlMapping(yamlBlock(deps.join('\n'), [dep])).condition).toBe('service_healthy');
    }
    const svc = yamlMapping(yamlBlock(compose, ['services', 'device-registry']));
    expect(svc.build).toBe('.');
  });
});
