// The embedded database's place under DATA_DIR: one running instance per directory
// (pg-owner.pid), and, run as root, a cluster directory the user postgres can reach.
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from '../log.js';

export const isAlive = (pid: number): boolean => {
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
export async function claimDataDir(dataDir: string): Promise<() => Promise<void>> {
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
      throw new Error(
        `DATA_DIR ${dataDir} is in use by another running instance (pid ${owner}); give each instance its own DATA_DIR (if that process is not this service, remove ${file})`,
      );
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
    const id = (flag: string) =>
      Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
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
    const searchable =
      (st.mode & 0o001) !== 0 ||
      (ids !== undefined && ((st.uid === ids.uid && (st.mode & 0o100) !== 0) || (st.gid === ids.gid && (st.mode & 0o010) !== 0)));
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
export async function clusterDirOf(dataDir: string, log: Logger): Promise<string> {
  const inside = path.join(dataDir, 'pg');
  if (process.getuid?.() !== 0) return inside;
  const link = await fs.lstat(inside).catch(() => undefined);
  if (link?.isSymbolicLink()) return fs.readlink(inside);
  const blocked = firstBlocked(path.resolve(dataDir), postgresIds());
  if (!blocked) return inside;
  if (link) {
    throw new Error(
      `${inside} cannot be reached by the user postgres, which runs the embedded PostgreSQL when the service runs as root (${blocked} is not searchable by it); move DATA_DIR elsewhere`,
    );
  }
  const target = path.join(ROOT_CLUSTERS, createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 16), 'pg');
  await fs.mkdir(path.dirname(target), { recursive: true, mode: 0o755 });
  await fs.chmod(ROOT_CLUSTERS, 0o755);
  await fs.symlink(target, inside);
  log.warn(
    'DATA_DIR cannot be reached by the user postgres (the embedded PostgreSQL runs as postgres when the service runs as root); its cluster is kept elsewhere and linked from DATA_DIR',
    { blocked, cluster: target, link: inside },
  );
  return target;
}
