// The service's pool replaces a connection after its lifetime, even one kept busy: history reads
// prepare a statement per region horizon, PostgreSQL keeps it for the connection's life, and a
// connection under steady load is never idle long enough to be closed. Without a lifetime the
// statements of every past horizon piled up in that backend for ever.
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { createLogger } from '../../src/log.js';
import { freshDatabase } from '../helpers/service.js';

const pools: pg.Pool[] = [];
afterAll(async () => {
  for (const p of pools) await p.end().catch(() => undefined);
});

/** The backend that answered, and how many statements it holds prepared. */
async function backend(pool: pg.Pool, name: string): Promise<{ pid: number; prepared: number }> {
  const { rows } = await pool.query<{ pid: number; prepared: number }>({
    name,
    text: 'SELECT pg_backend_pid() AS pid, (SELECT count(*) FROM pg_prepared_statements)::int AS prepared',
  });
  return rows[0]!;
}

describe('database connection lifetime', () => {
  it('a connection in steady use is replaced after its lifetime, and the statements it prepared go with it', async () => {
    const pool = createPool(await freshDatabase(), 1, createLogger('silent'), { lifetimeSeconds: 2 });
    pools.push(pool);
    const first = await backend(pool, 'horizon-1');
    expect(first.prepared).toBe(1);
    // Busy: a read every 100 ms, never idle for long; each new horizon prepares a statement.
    let last = first;
    for (let i = 2; i <= 4; i++) {
      await new Promise((r) => setTimeout(r, 100));
      last = await backend(pool, `horizon-${i}`);
    }
    expect(last).toEqual({ pid: first.pid, prepared: 4 });
    const deadline = Date.now() + 10_000;
    while (last.pid === first.pid && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      last = await backend(pool, 'horizon-5');
    }
    expect(last.pid).not.toBe(first.pid);
    expect(last.prepared).toBe(1);
  });
});
