// Numbered migrations from sql/: each runs once, in its own transaction, recorded in
// schema_migrations. A session advisory lock keeps two starting instances from racing.
import fs from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import type { Logger } from '../log.js';
import { liftTimeouts } from './limits.js';
import { projectRoot } from '../paths.js';

const LOCK_KEY = 7_341_002_117; // arbitrary, constant: "device-registry migrations"

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export async function loadMigrations(dir = path.join(projectRoot, 'sql')): Promise<Migration[]> {
  const files = (await fs.readdir(dir)).filter((f) => /^\d+_.+\.sql$/.test(f));
  const migrations = await Promise.all(
    files.map(async (name) => ({ version: Number(name.split('_')[0]), name, sql: await fs.readFile(path.join(dir, name), 'utf8') })),
  );
  migrations.sort((a, b) => a.version - b.version);
  for (let i = 1; i < migrations.length; i++) {
    if (migrations[i]!.version === migrations[i - 1]!.version) throw new Error(`two migrations numbered ${migrations[i]!.version}`);
  }
  return migrations;
}

/**
 * Settings are exposed to the SQL as `current_setting('app.<name>')` (SET LOCAL), so a
 * migration can read configuration such as the history chunk interval.
 */
export async function migrate(pool: pg.Pool, log: Logger, settings: Record<string, string> = {}): Promise<number[]> {
  const migrations = await loadMigrations();
  const client = await pool.connect();
  const applied: number[] = [];
  let restore: (() => Promise<void>) | undefined;
  try {
    // A migration (or waiting for another instance's) may take longer than DB_STATEMENT_TIMEOUT_MS.
    restore = await liftTimeouts(client);
    await client.query('SELECT pg_advisory_lock($1)', [LOCK_KEY]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = new Set((await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      await client.query('BEGIN');
      try {
        for (const [name, value] of Object.entries(settings)) {
          await client.query('SELECT set_config($1, $2, true)', [`app.${name}`, value]);
        }
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${m.name} failed: ${(err as Error).message}`);
      }
      applied.push(m.version);
      log.info('migration applied', { migration: m.name });
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => undefined);
    // Back to the connection's own timeouts (the pool's) before others use it.
    const reset = restore
      ? await restore().then(
          () => undefined,
          (err: Error) => err,
        )
      : new Error('timeouts not lifted');
    client.release(reset);
  }
  return applied;
}
