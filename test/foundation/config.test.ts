import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ConfigError, readConfig } from '../../src/config.js';
import { projectRoot } from '../../src/paths.js';
import { spawnService, startFailure, tempDir } from '../helpers/service.js';

const KEY = 'a'.repeat(64);

describe('configuration', () => {
  it('has the documented defaults', () => {
    const c = readConfig({});
    expect(c.port).toBe(8000);
    expect(c.internalPort).toBe(8001);
    expect(c.internalHost).toBe('127.0.0.1');
    expect(c.mqttPort).toBe(1883);
    expect(c.maxBodyBytes).toBe(1024 * 1024);
    expect(c.tokenTtlSeconds).toBe(3600);
    expect(c.maxPageSize).toBe(1000);
    expect(c.databaseUrl).toBeUndefined();
    expect(c.dataDir.endsWith('/data')).toBe(true);
    const sharedBuffersMb = Number(/^(\d+)MB$/.exec(c.embeddedPgSettings.shared_buffers!)?.[1]);
    expect(sharedBuffersMb).toBeGreaterThanOrEqual(128);
    expect(sharedBuffersMb).toBeLessThanOrEqual(1024);
    expect(c.embeddedPgSettings).toMatchObject({ max_wal_size: '4GB', checkpoint_timeout: '15min' });
    expect(readConfig({ EMBEDDED_PG_SETTINGS: ' shared_buffers=2GB  jit=off ' }).embeddedPgSettings).toMatchObject({
      shared_buffers: '2GB',
      jit: 'off',
      max_wal_size: '4GB',
    });
    expect(Object.isFrozen(c)).toBe(true);
  });

  it.each([
    ['PORT', 'eighty', /PORT must be an integer between 0 and 65535/],
    ['PORT', '70000', /PORT must be an integer/],
    ['INTERNAL_PORT', '-1', /INTERNAL_PORT must be an integer/],
    ['LOG_LEVEL', 'loud', /LOG_LEVEL must be one of debug, info, warn, error, silent/],
    ['EMBEDDED_PG_SETTINGS', 'shared_buffers', /EMBEDDED_PG_SETTINGS must be blank-separated PostgreSQL settings/],
    ['EMBEDDED_PG_SETTINGS', 'a=b;c=d', /EMBEDDED_PG_SETTINGS must be blank-separated/],
    ['MAX_BODY_BYTES', '0', /MAX_BODY_BYTES must be an integer between 1/],
    ['DATABASE_URL', 'mysql://x', /DATABASE_URL must be a URL with scheme postgres/],
    ['MQTT_URL', 'not a url', /MQTT_URL must be a URL/],
    ['PSK_ENCRYPTION_KEY', 'short', /PSK_ENCRYPTION_KEY must be 32 bytes/],
    ['JWT_SECRET', 'short', /JWT_SECRET must be at least 32 characters/],
    ['HISTORY_CHUNK_INTERVAL', 'often', /HISTORY_CHUNK_INTERVAL must be an interval/],
    ['HISTORY_CHUNK_INTERVAL', '0 days', /HISTORY_CHUNK_INTERVAL must be an interval from "1 minute" to "366 days"/],
    ['HISTORY_CHUNK_INTERVAL', '99999999999999 days', /HISTORY_CHUNK_INTERVAL must be an interval from/],
  ])('rejects %s=%s naming the variable', (name, value, message) => {
    const run = () => readConfig({ [name]: value });
    expect(run).toThrow(ConfigError);
    expect(run).toThrow(message);
  });

  it.each([
    ['EMBEDDED_PG_PORT', '5999'],
    ['EMBEDDED_PG_SETTINGS', 'shared_buffers=2GB'],
  ])('refuses %s with DATABASE_URL set (it would be ignored: there is no embedded PostgreSQL then)', (name, value) => {
    // Before, found by an audit: both were ignored without a word.
    const run = () => readConfig({ DATABASE_URL: 'postgres://x@localhost/db', PSK_ENCRYPTION_KEY: KEY, [name]: value });
    expect(run).toThrow(ConfigError);
    expect(run).toThrow(`${name} configures the embedded PostgreSQL; with DATABASE_URL set, configure that server`);
    expect(readConfig({ DATABASE_URL: 'postgres://x@localhost/db', PSK_ENCRYPTION_KEY: KEY, [name]: '  ' }).databaseUrl).toBeDefined();
  });

  it('needs PSK_ENCRYPTION_KEY with DATABASE_URL', () => {
    expect(() => readConfig({ DATABASE_URL: 'postgres://x@localhost/db' })).toThrow(
      /PSK_ENCRYPTION_KEY must be set when DATABASE_URL is set/,
    );
    expect(readConfig({ DATABASE_URL: 'postgres://x@localhost/db', PSK_ENCRYPTION_KEY: KEY }).pskEncryptionKey?.length).toBe(32);
  });

  it('accepts a base64 PSK key', () => {
    const b64 = Buffer.alloc(32, 7).toString('base64');
    expect(readConfig({ PSK_ENCRYPTION_KEY: b64 }).pskEncryptionKey).toEqual(Buffer.alloc(32, 7));
  });

  it('a bad value stops the process with one line naming the variable: a JSON log line by default', async () => {
    const svc = spawnService({ PORT: 'http', DATA_DIR: await tempDir() });
    expect(await svc.exited).toBe(2);
    const lines = svc.output.filter((l) => l.trim() !== '');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      level: 'error',
      msg: 'configuration error: PORT must be an integer between 0 and 65535, got "http"',
      variable: 'PORT',
    });
  });

  it('with LOG_FORMAT=pretty the same failure is one readable line, not JSON', async () => {
    const svc = spawnService({ PORT: 'http', DATA_DIR: await tempDir(), LOG_FORMAT: 'pretty' });
    expect(await svc.exited).toBe(2);
    const lines = svc.output.filter((l) => l.trim() !== '');
    expect(lines).toHaveLength(1);
    // Colour codes aside: time, level, message.
    const plain = stripVTControlCharacters(lines[0]!);
    expect(plain).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] ERROR: configuration error: PORT must be an integer between 0 and 65535, got "http"/);
    expect((): unknown => JSON.parse(lines[0]!)).toThrow();
  });

  it("README's configuration table gives every whole-number variable the range the start enforces", () => {
    const source = fs.readFileSync(path.join(projectRoot, 'src/config.ts'), 'utf8');
    const names = [...source.matchAll(/\binteger\(env, '([A-Z0-9_]+)'/gi)].map((m) => m[1]!);
    expect(names.length).toBeGreaterThan(30);
    const readme = fs.readFileSync(path.join(projectRoot, 'README.md'), 'utf8');
    const wrong: string[] = [];
    for (const name of names) {
      // The range the start enforces, as its failure line states it.
      let enforced = '';
      try {
        readConfig({ [name]: 'x' });
      } catch (err) {
        enforced = /between (-?\d+) and (-?\d+),/
          .exec((err as Error).message)!
          .slice(1)
          .join('-');
      }
      const row = readme.split('\n').find((l) => l.startsWith('|') && l.includes(`\`${name}\``));
      const documented = [...(row ?? '').matchAll(/(\d[\d,]*)–(\d[\d,]*)/g)].map((m) => `${m[1]}-${m[2]}`.replaceAll(',', ''));
      if (!documented.includes(enforced)) wrong.push(`${name}: enforced ${enforced}, README ${documented.join(' ') || 'none'}`);
    }
    expect(wrong).toEqual([]);
  });

  it('pretty: a value holding a line break is still one line, and cannot pass for another log line', async () => {
    const svc = spawnService({ PORT: '80\n[01:00:00.000] INFO: ready', DATA_DIR: await tempDir(), LOG_FORMAT: 'pretty' });
    expect(await svc.exited).toBe(2);
    const lines = svc.output.filter((l) => l.trim() !== '');
    expect(lines).toHaveLength(1);
    expect(stripVTControlCharacters(lines[0]!)).toContain('got "80\\n[01:00:00.000] INFO: ready"');
  });

  it("MQTT_URL with a '%' that does not decode in its password: one line naming MQTT_URL, without the password", async () => {
    // Before: accepted, then the ingest router thread died on decodeURIComponent at its first
    // connection ("URI malformed" and a stack trace, then "the ingest router thread exited").
    expect(() => readConfig({ MQTT_URL: 'mqtt://svc:a%zz@127.0.0.1:1883' })).toThrow(ConfigError);
    expect(readConfig({ MQTT_URL: 'mqtt://svc:a%25zz%3A@127.0.0.1:1883' }).mqttUrl).toBe('mqtt://svc:a%25zz%3A@127.0.0.1:1883');
    const password = `pw-${crypto.randomBytes(8).toString('hex')}%zz`;
    const svc = spawnService({ MQTT_URL: `mqtt://svc:${password}@127.0.0.1:1`, DATA_DIR: await tempDir() });
    expect(await svc.exited).toBe(2);
    expect(svc.output.filter((l) => l.trim() !== '')).toHaveLength(1);
    expect(startFailure(svc)).toBe(
      "configuration error: MQTT_URL has a '%' in its user name or password that does not decode: write '%' as %25, and other characters as UTF-8 escapes (é as %C3%A9)",
    );
    expect(svc.output.join('\n')).not.toContain(password.slice(0, 19));
  });

  it("a '/' left unencoded in DATABASE_URL's password: one line naming DATABASE_URL, without the password", async () => {
    // Before: accepted as host "postgres", port 1234 and the rest of the password as the path,
    // shown whole in "start failed: cannot use the database postgres:1234/<rest>@127.0.0.1:1/x".
    const rest = `pw${crypto.randomBytes(8).toString('hex')}`;
    for (const name of ['DATABASE_URL', 'MQTT_URL'])
      expect(() =>
        readConfig({ [name]: `${name === 'MQTT_URL' ? 'mqtt' : 'postgres'}://svc:1234/${rest}@127.0.0.1:1/x`, PSK_ENCRYPTION_KEY: KEY }),
      ).toThrow(new RegExp(`^${name} has an '@' after its host`));
    const svc = spawnService({
      DATABASE_URL: `postgres://postgres:1234/${rest}@127.0.0.1:1/x`,
      PSK_ENCRYPTION_KEY: KEY,
      DATA_DIR: await tempDir(),
    });
    expect(await svc.exited).toBe(2);
    expect(svc.output.filter((l) => l.trim() !== '')).toHaveLength(1);
    expect(startFailure(svc)).toMatch(/^configuration error: DATABASE_URL has an '@' after its host/);
    expect(svc.output.join('\n')).not.toContain(rest);
  });

  it("a '%' escape that does not decode in DATABASE_URL's user, password or database: one line naming DATABASE_URL, without the password", async () => {
    // Before: accepted, then the start failed with "cannot use the database ... (DATABASE_URL):
    // URI malformed" (pg decodes them), which does not say what is wrong nor how to write it.
    const message =
      "DATABASE_URL has a '%' in its user name, password or database name that does not decode: write '%' as %25, and other characters as UTF-8 escapes (é as %C3%A9)";
    for (const v of ['postgres://u:p%E9@h:5432/db', 'postgres://u%zz:p@h/db', 'postgres://u:p@h/d%E9b', 'postgresql://u:%@h/db'])
      expect(() => readConfig({ DATABASE_URL: v, PSK_ENCRYPTION_KEY: KEY }), v).toThrow(message);
    for (const v of ['postgres://u:p%C3%A9%25@h:5432/db', 'postgres://u@h/d%C3%A9b'])
      expect(readConfig({ DATABASE_URL: v, PSK_ENCRYPTION_KEY: KEY }).databaseUrl, v).toBe(v);
    const password = `pw-${crypto.randomBytes(8).toString('hex')}%E9`;
    const svc = spawnService({
      DATABASE_URL: `postgres://svc:${password}@127.0.0.1:1/x`,
      PSK_ENCRYPTION_KEY: KEY,
      DATA_DIR: await tempDir(),
    });
    expect(await svc.exited).toBe(2);
    expect(svc.output.filter((l) => l.trim() !== '')).toHaveLength(1);
    expect(startFailure(svc)).toBe(`configuration error: ${message}`);
    expect(svc.output.join('\n')).not.toContain(password.slice(0, 19));
  });

  it('MQTT_URL with a path, query or fragment is refused, naming what it takes (was accepted, the rest ignored)', () => {
    const message = 'MQTT_URL has a path, query or fragment, which a broker address does not take: mqtt://[user:password@]host:port';
    for (const v of ['mqtt://h:1883/x', 'mqtt://h:1883/?clientId=a', 'mqtt://h:1883#f', 'mqtts://u:p@h:8883/mqtt'])
      expect(() => readConfig({ MQTT_URL: v }), v).toThrow(message);
    for (const v of ['mqtt://h:1883', 'mqtt://h:1883/', 'mqtts://u:p@h:8883']) expect(readConfig({ MQTT_URL: v }).mqttUrl, v).toBe(v);
  });

  it('two of its own listeners on one port is a configuration error naming both (found by an audit: the start blamed a taken port)', async () => {
    // (Files that are only checked for being readable: the start fails before they are used.)
    const dir = await tempDir();
    for (const f of ['cert', 'key']) fs.writeFileSync(path.join(dir, `${f}.pem`), 'not read here');
    const tls = { MQTT_TLS_CERT: path.join(dir, 'cert.pem'), MQTT_TLS_KEY: path.join(dir, 'key.pem') };
    const refused: Array<[Record<string, string>, string]> = [
      [{ PORT: '9000', INTERNAL_PORT: '9000' }, 'INTERNAL_PORT is 9000, the port of PORT too'],
      [{ MQTT_PORT: '8000' }, 'MQTT_PORT is 8000, the port of PORT too'],
      [{ MQTT_PORT: '8001', MQTT_HOST: '127.0.0.1' }, 'MQTT_PORT is 8001, the port of INTERNAL_PORT too'],
      [{ ...tls, MQTT_TLS_PORT: '8000' }, 'MQTT_TLS_PORT is 8000, the port of PORT too'],
      [{ ...tls, MQTT_TLS_PORT: '1883' }, 'MQTT_TLS_PORT is 1883, the port of MQTT_PORT too'],
      [{ EMBEDDED_PG_PORT: '8001' }, 'EMBEDDED_PG_PORT is 8001, the port of INTERNAL_PORT too'],
      [{ HOST: '::', INTERNAL_HOST: '127.0.0.1', INTERNAL_PORT: '8000' }, 'INTERNAL_PORT is 8000, the port of PORT too'],
    ];
    for (const [env, message] of refused) {
      let thrown: unknown;
      try {
        readConfig(env);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, JSON.stringify(env)).toBeInstanceOf(ConfigError);
      expect((thrown as ConfigError).message).toBe(`${message}: each listener needs a port of its own (or 0: any free one)`);
    }
    // Apart: other addresses that do not overlap, any free port twice, a listener that is not started.
    for (const env of [
      { HOST: '127.0.0.1', INTERNAL_HOST: '127.0.0.2', PORT: '9000', INTERNAL_PORT: '9000' },
      { HOST: '0.0.0.0', INTERNAL_HOST: '::1', PORT: '9000', INTERNAL_PORT: '9000' },
      { PORT: '0', INTERNAL_PORT: '0', MQTT_PORT: '0' },
      { MQTT_URL: 'mqtt://127.0.0.1:1883', MQTT_PORT: '8000' },
      { ...tls, MQTT_PLAIN: 'false', MQTT_PORT: '8000', MQTT_TLS_PORT: '8883' },
      { DATABASE_URL: 'postgres://u@h/db', PSK_ENCRYPTION_KEY: KEY, MQTT_DEVICE_AUTH: 'optional', INTERNAL_PORT: '5432' },
    ])
      expect(() => readConfig(env), JSON.stringify(env)).not.toThrow();
    // The start says so in one line (before: 'start failed: cannot listen on 0.0.0.0:<port> (PORT/HOST); is the port taken?').
    const svc = spawnService({ ...tls, MQTT_TLS_PORT: '8000', DATA_DIR: await tempDir() });
    expect(await svc.exited).toBe(2);
    expect(startFailure(svc)).toBe(
      'configuration error: MQTT_TLS_PORT is 8000, the port of PORT too: each listener needs a port of its own (or 0: any free one)',
    );
  });

  it('a bad LOG_FORMAT is a configuration error too (written as JSON)', async () => {
    const svc = spawnService({ LOG_FORMAT: 'xml', DATA_DIR: await tempDir() });
    expect(await svc.exited).toBe(2);
    expect(startFailure(svc)).toBe('configuration error: LOG_FORMAT must be one of json, pretty, got "xml"');
  });
});
