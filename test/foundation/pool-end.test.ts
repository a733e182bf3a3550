// endPool resolves once the pool's connections are closed, not merely asked to close: the
// embedded PostgreSQL is stopped right after it, and a backend still open then is ended by the
// server ("terminating connection due to administrator command"), which the pool logged as a
// warning before the one line of a failed start (test/foundation/lifecycle.test.ts).
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createPool, endPool } from '../../src/db/pool.js';
import { createLogger } from '../../src/log.js';
import { freshDatabase } from '../helpers/service.js';

describe('endPool', () => {
  it('resolves only once every connection of the pool has closed', async () => {
    const url = await freshDatabase();
    const lines: string[] = [];
    const pool = createPool(url, 4, createLogger('debug', {}, { write: (l) => lines.push(l) }));
    let opened = 0;
    let closed = 0;
    pool.on('connect', () => opened++);
    pool.on('remove', () => closed++);
    // Four connections at once, all idle afterwards.
    await Promise.all([1, 2, 3, 4].map(() => pool.query('SELECT pg_sleep(0.05)')));
    expect(opened).toBe(4);
    await endPool(pool);
    expect(closed).toBe(4);
    // And the server has none of them left to end.
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      const { rows } = await other.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
      );
      expect(rows[0]!.n).toBe(0);
    } finally {
      await other.end();
    }
    expect(lines.filter((l) => l.includes('database connection failed'))).toEqual([]);
  });
});
