// Start, restart and shutdown of the real process with the zero-setup defaults: the
// embedded PostgreSQL under DATA_DIR and the embedded broker.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { execSync } from 'node:child_process';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import type { TokenAnswer } from '../helpers/api.js';
import {
  http,
  loggedAddress,
  type SpawnedService,
  startFailure,
  tempDir,
  testEnv,
  useSpawnedServices,
  zeroSetupEnv,
} from '../helpers/service.js';

const spawned = useSpawnedServices();

function postgresRunningFor(dir: string): boolean {
  try {
    return execSync('ps -eo args', { encoding: 'utf8' })
      .split('\n')
      .some((l) => l.includes('postgres') && l.includes(dir));
  } catch {
    return false;
  }
}

/** Spawns the service on free ports (any of them overridable); killed after the suite. */
function spawnOnFreePorts(env: Record<string, string>): SpawnedService {
  return spawned.spawn({ PORT: '0', INTERNAL_PORT: '0', MQTT_PORT: '0', HOST: '127.0.0.1', ...env });
}

/** Spawns on free ports and waits until ready. */
function start(env: Record<string, string>) {
  return spawned.ready({ PORT: '0', INTERNAL_PORT: '0', MQTT_PORT: '0', HOST: '127.0.0.1', ...env }, 60_000);
}

const logInStatus = async (base: string, username = 'admin', passwd = 'admin') =>
  (await http('POST', `${base}/auth`, { body: { username, passwd } })).status;

async function stopCleanly(svc: SpawnedService, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  svc.child.kill(signal);
  expect(await svc.exited).toBe(0);
}

// Each test starts one or two zero-setup instances (initdb each): slow on a busy machine.
describe('zero-setup start', { timeout: 90_000 }, () => {
  it('starts with the embedded database and broker, restarts on the same data, and shuts down cleanly', async () => {
    const dataDir = await tempDir();
    const first = await start({ DATA_DIR: dataDir });
    expect(first.svc.output.some((l) => l.includes('initialising embedded PostgreSQL'))).toBe(true);
    for (const msg of [
      'embedded PostgreSQL listening',
      'embedded MQTT broker listening',
      'public HTTP API listening',
      'internal HTTP API listening',
    ]) {
      expect(first.svc.output.filter((l) => l.includes(msg))).toHaveLength(1);
    }
    const auth = await http<TokenAnswer>('POST', `${first.base}/auth`, { body: { username: 'admin', passwd: 'admin' } });
    expect(auth.status).toBe(200);
    // Create a user so the restart can show the data survived.
    await http('POST', `${first.base}/auth/user`, {
      token: auth.body.jwt,
      body: { username: 'kept', passwd: 'pw', service: 't1', profile: 'user' },
    });

    const t0 = Date.now();
    await stopCleanly(first.svc);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(postgresRunningFor(dataDir)).toBe(false);

    const second = await start({ DATA_DIR: dataDir, EMBEDDED_PG_SETTINGS: 'shared_buffers=48MB  work_mem=8MB' });
    expect(second.svc.output.some((l) => l.includes('initialising'))).toBe(false);
    expect(await logInStatus(second.base, 'kept', 'pw')).toBe(200);
    // The embedded server runs with its tuned defaults and the settings given.
    const pgAddress = loggedAddress(await second.svc.waitFor(/embedded PostgreSQL listening/));
    const password = (await fs.readFile(path.join(dataDir, 'pg-password'), 'utf8')).trim();
    const client = new pg.Client({ connectionString: `postgres://postgres:${password}@${pgAddress}/postgres` });
    await client.connect();
    expect((await client.query<{ shared_buffers: string }>('SHOW shared_buffers')).rows[0]!.shared_buffers).toBe('48MB');
    expect((await client.query<{ work_mem: string }>('SHOW work_mem')).rows[0]!.work_mem).toBe('8MB');
    expect((await client.query<{ max_wal_size: string }>('SHOW max_wal_size')).rows[0]!.max_wal_size).toBe('4GB');
    await client.end();
    await stopCleanly(second.svc, 'SIGINT');
    expect(postgresRunningFor(dataDir)).toBe(false);
  });

  it('recovers the data directory after the process was killed with SIGKILL', async () => {
    const dataDir = await tempDir();
    const first = await start({ DATA_DIR: dataDir });
    first.svc.child.kill('SIGKILL');
    await first.svc.exited;
    const second = await start({ DATA_DIR: dataDir });
    expect(await logInStatus(second.base)).toBe(200);
    await stopCleanly(second.svc);
  });

  it('SIGTERM during the first start (initdb) stops cleanly, and the next start uses the data directory', async () => {
    const dataDir = await tempDir();
    const svc = spawnOnFreePorts({ DATA_DIR: dataDir });
    await svc.waitFor(/initialising embedded PostgreSQL/);
    await stopCleanly(svc);
    expect(svc.output.some((l) => l.includes('stopped before ready'))).toBe(true);
    expect(postgresRunningFor(dataDir)).toBe(false);
    const next = await start({ DATA_DIR: dataDir });
    expect(await logInStatus(next.base)).toBe(200);
    await stopCleanly(next.svc);
  });

  it('SIGTERM while the modules still load (before any of its handlers could run) stops cleanly, code 0', async () => {
    // A loader hook sends the process SIGTERM at the moment it loads src/service.js (and with it
    // most of the modules): before main.ts held signals from its first import, that killed it (143).
    const dir = await tempDir();
    await fs.writeFile(
      path.join(dir, 'hooks.mjs'),
      `export async function load(url, context, next) {
        if (url.endsWith('/dist/src/service.js')) { process.kill(process.pid, 'SIGTERM'); await new Promise((r) => setTimeout(r, 300)); }
        return next(url, context);
      }`,
    );
    await fs.writeFile(path.join(dir, 'register.mjs'), `import { register } from 'node:module'; register('./hooks.mjs', import.meta.url);`);
    const svc = spawnOnFreePorts({ DATA_DIR: path.join(dir, 'data'), NODE_OPTIONS: `--import=${path.join(dir, 'register.mjs')}` });
    expect(await svc.exited).toBe(0);
    expect(svc.output.some((l) => l.includes('stopped before ready'))).toBe(true);
    // Nothing was started once the modules had loaded: the embedded initdb, started before, made
    // the exit wait for it and, on a loaded machine, outlast the shutdown timeout (exit 1).
    expect(svc.output.filter((l) => l.includes('embedded PostgreSQL'))).toEqual([]);
  });

  it('a second instance on the same DATA_DIR is refused and leaves the running one alone', async () => {
    const dataDir = await tempDir();
    const first = await start({ DATA_DIR: dataDir });
    const second = spawnOnFreePorts({ DATA_DIR: dataDir });
    expect(await second.exited).toBe(2);
    expect(startFailure(second)).toMatch(/^start failed: DATA_DIR .* is in use by another running instance \(pid \d+\)/);
    expect((await http('GET', `${first.base}/health`)).status).toBe(200);
    expect(await logInStatus(first.base)).toBe(200);
    await stopCleanly(first.svc);
  });

  it('an HTTP port held by another instance (uWS, SO_REUSEPORT) stops the start with one line naming PORT', async () => {
    const first = await start({ DATA_DIR: await tempDir() });
    const port = new URL(first.base).port;
    const second = spawnOnFreePorts({ PORT: port, DATA_DIR: await tempDir() });
    expect(await second.exited).toBe(2);
    expect(startFailure(second)).toBe(`start failed: cannot listen on 127.0.0.1:${port} (PORT/HOST); is the port taken?`);
    // All of the first instance's requests still reach it.
    for (let i = 0; i < 5; i++) expect((await http('GET', `${first.base}/health`)).status).toBe(200);
    await stopCleanly(first.svc);
  });

  it('a HOST that is no address of this machine stops the start with one line saying so, not "is the port taken?"', async () => {
    // 192.0.2.1: TEST-NET-1 (RFC 5737), never a local address.
    const svc = spawned.spawn(await testEnv({ HOST: '192.0.2.1' }));
    expect(await svc.exited).toBe(2);
    expect(startFailure(svc)).toMatch(
      /^start failed: cannot listen on 192\.0\.2\.1:0 \(PORT\/HOST\); no network interface of this machine has that address$/,
    );
  });

  it('an MQTT_HOST that does not resolve, or is no address of this machine, stops the start with one line naming it', async () => {
    // Before: "start failed: ingest could not start: getaddrinfo ENOTFOUND …", naming no variable.
    for (const [mqttHost, cause] of [
      ['no-such-host.invalid', 'the host name does not resolve'],
      ['192.0.2.1', 'no network interface of this machine has that address'],
    ]) {
      const svc = spawned.spawn(await testEnv({ MQTT_URL: undefined, MQTT_HOST: mqttHost }));
      expect(await svc.exited).toBe(2);
      expect(startFailure(svc)).toBe(
        `start failed: ingest could not start: cannot listen on ${mqttHost}:0 (MQTT_PORT/MQTT_HOST); ${cause}`,
      );
    }
  });

  it('a start that fails after the embedded database is up prints its one line and no database warning', async () => {
    // Before: the pool's end resolved once its connections were asked to close, not once they
    // had; the embedded PostgreSQL was stopped next and ended them first, so the failure often
    // came after one to three 'idle database connection failed: terminating connection due to
    // administrator command' warnings (seen by an audit in most runs by hand; a race, so the
    // deterministic check is test/foundation/pool-end.test.ts).
    for (let run = 0; run < 2; run++) {
      const svc = spawned.spawn(await zeroSetupEnv({ MQTT_HOST: '192.0.2.1', LOG_LEVEL: 'warn' }));
      expect(await svc.exited).toBe(2);
      expect(startFailure(svc)).toMatch(/^start failed: ingest could not start: cannot listen on 192\.0\.2\.1/);
      expect(svc.output.filter((l) => l.trim() !== '')).toHaveLength(1);
    }
  });

  it('an EMBEDDED_PG_SETTINGS value PostgreSQL refuses stops the start with one line naming it and saying why', async () => {
    // Before: "embedded PostgreSQL did not start on 127.0.0.1:<port> (port taken? set EMBEDDED_PG_PORT): exited early",
    // PostgreSQL's reason only in its own output at LOG_LEVEL=debug.
    const svc = spawned.spawn(await zeroSetupEnv({ EMBEDDED_PG_SETTINGS: 'shared_buffers=banana' }));
    expect(await svc.exited).toBe(2);
    expect(startFailure(svc)).toBe(
      'configuration error: EMBEDDED_PG_SETTINGS holds a setting PostgreSQL refused: invalid value for parameter "shared_buffers": "banana"',
    );
  });

  it.runIf(process.getuid?.() === 0)(
    'as root with DATA_DIR inside a private directory (a checkout under /root): the cluster is kept where postgres can reach it, linked from DATA_DIR',
    async () => {
      const parent = await tempDir();
      await fs.chmod(parent, 0o700);
      const dataDir = path.join(parent, 'data');
      const first = await start({ DATA_DIR: dataDir });
      const cluster = await fs.readlink(path.join(dataDir, 'pg'));
      try {
        expect(cluster).toMatch(/^\/var\/lib\/device-registry\/[0-9a-f]{16}\/pg$/);
        const auth = await http<TokenAnswer>('POST', `${first.base}/auth`, { body: { username: 'admin', passwd: 'admin' } });
        expect(auth.status).toBe(200);
        await http('POST', `${first.base}/auth/user`, {
          token: auth.body.jwt,
          body: { username: 'kept', passwd: 'pw', service: 't1', profile: 'user' },
        });
        await stopCleanly(first.svc);
        expect(postgresRunningFor(cluster)).toBe(false);
        const second = await start({ DATA_DIR: dataDir });
        expect(second.svc.output.some((l) => l.includes('initialising'))).toBe(false);
        expect(await logInStatus(second.base, 'kept', 'pw')).toBe(200);
        await stopCleanly(second.svc);
      } finally {
        await fs.rm(path.dirname(cluster), { recursive: true, force: true });
      }
    },
  );

  it('a taken MQTT port stops the start with one line naming MQTT_PORT and MQTT_URL', async () => {
    const port = await freePort();
    const blocker = net.createServer();
    await new Promise<void>((r) => blocker.listen(port, '127.0.0.1', r));
    try {
      const svc = spawned.spawn({
        DATA_DIR: await tempDir(),
        PORT: '0',
        INTERNAL_PORT: '0',
        MQTT_HOST: '127.0.0.1',
        MQTT_PORT: String(port),
      });
      expect(await svc.exited).toBe(2);
      const last = startFailure(svc);
      expect(last).toMatch(/^configuration error: MQTT_PORT \d+ is already in use .*MQTT_URL/);
    } finally {
      blocker.close();
    }
  });

  it("a broker that refuses MQTT_URL's login stops the start with one line naming MQTT_URL and why, without the password", async () => {
    // Before: 'start failed: ingest could not start: the broker refused the connection (code 134)',
    // naming neither the variable nor the reason (seen by an audit with a wrong MQTT_URL login).
    const first = await start({ DATA_DIR: await tempDir() });
    const mqtt = new URL(loggedAddress(await first.svc.waitFor(/embedded MQTT broker listening/)));
    const password = `pw${crypto.randomBytes(8).toString('hex')}`;
    const svc = spawned.spawn(await testEnv({ MQTT_URL: `mqtt://svc:${password}@127.0.0.1:${mqtt.port}` }));
    // (with what it wrote and how it ended: once in CI it ended by a signal, not reproduced since)
    const code = await svc.exited;
    expect(code, `exit ${code}, signal ${svc.child.signalCode}:\n${svc.output.join('\n')}`).toBe(2);
    expect(svc.output.filter((l) => l.trim() !== '')).toHaveLength(1);
    expect(startFailure(svc)).toBe(
      `start failed: ingest could not start: the broker at 127.0.0.1:${mqtt.port} (MQTT_URL) refused the login: bad user name or password (code 134); check the user name and password in MQTT_URL`,
    );
    expect(svc.output.join('\n')).not.toContain(password);
    await stopCleanly(first.svc);
  });

  it('a DATABASE_URL that cannot be used stops the start with one line naming it, without its password', async () => {
    const port = await freePort();
    const svc = spawned.spawn({
      DATA_DIR: await tempDir(),
      PORT: '0',
      INTERNAL_PORT: '0',
      MQTT_PORT: '0',
      DATABASE_URL: `postgres://u:s3cret-pw@127.0.0.1:${port}/registry`,
      PSK_ENCRYPTION_KEY: 'b'.repeat(64),
      ADMIN_PASSWORD: 'x',
    });
    expect(await svc.exited).toBe(2);
    const lines = svc.output.filter((l) => l.trim());
    expect(startFailure(svc)).toMatch(
      new RegExp(`^start failed: cannot use the database 127.0.0.1:${port}/registry \\(DATABASE_URL\\): connect ECONNREFUSED`),
    );
    expect(lines.join('\n')).not.toContain('s3cret-pw');
  });

  it('a DATA_DIR that is a file stops the start with one line naming DATA_DIR', async () => {
    const file = path.join(await tempDir(), 'a-file');
    await fs.writeFile(file, 'x');
    const svc = spawned.spawn({ DATA_DIR: file, PORT: '0', INTERNAL_PORT: '0', MQTT_PORT: '0' });
    expect(await svc.exited).toBe(2);
    expect(startFailure(svc)).toMatch(new RegExp(`^start failed: DATA_DIR ${file} cannot be used as a writable directory: EEXIST`));
  });

  it('a DATA_DIR that cannot be created stops the start with one line naming DATA_DIR (inside /proc, too)', async () => {
    for (const dir of ['/proc/nonexistent/data', path.join(await tempDir(), 'a-file', 'data')]) {
      if (dir.includes('a-file')) await fs.writeFile(path.dirname(dir), 'x');
      const svc = spawned.spawn({ DATA_DIR: dir, PORT: '0', INTERNAL_PORT: '0', MQTT_PORT: '0' });
      expect(await svc.exited).toBe(2);
      expect(startFailure(svc)).toMatch(new RegExp(`^start failed: DATA_DIR ${dir} cannot be used as a writable directory: E`));
    }
  });

  it('with DATABASE_URL and no users, a missing ADMIN_PASSWORD stops the start with a clear message', async () => {
    const { freshDatabase } = await import('../helpers/service.js');
    const svc = spawned.spawn({
      DATA_DIR: await tempDir(),
      PORT: '0',
      INTERNAL_PORT: '0',
      MQTT_PORT: '0',
      DATABASE_URL: await freshDatabase(),
      PSK_ENCRYPTION_KEY: 'b'.repeat(64),
    });
    expect(await svc.exited).toBe(2);
    expect(startFailure(svc)).toMatch(/^configuration error: ADMIN_PASSWORD must be set when DATABASE_URL is set/);
  });
});
