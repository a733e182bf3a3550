// inTransaction (src/db/pool.ts) against a real PostgreSQL: a deadlock victim runs again, other
// failures roll back once and are not retried.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransaction } from '../../src/db/pool.js';
import { countOf } from '../helpers/db.js';
import { freshDatabase } from '../helpers/service.js';

let pool: pg.Pool;

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: await freshDatabase(), max: 4 });
  await pool.query('CREATE TABLE marks (who text)');
});
afterAll(() => pool?.end());

/** Resolves once both parties have arrived. */
function barrier(): () => Promise<void> {
  let arrived = 0;
  let release!: () => void;
  const all = new Promise<void>((r) => (release = r));
  return () => {
    if (++arrived === 2) release();
    return all;
  };
}

describe('inTransaction', () => {
  it('two transactions that deadlock: the victim runs again from the start and both commit', async () => {
    const meet = barrier();
    const attempts = { a: 0, b: 0 };
    // Each takes one lock, waits for the other to take its own, then wants the other's.
    const run = (who: 'a' | 'b', first: number, second: number) =>
      inTransaction(pool, async (c) => {
        attempts[who]++;
        await c.query('INSERT INTO marks VALUES ($1)', [who]);
        await c.query('SELECT pg_advisory_xact_lock($1)', [first]);
        if (attempts[who] === 1) await meet();
        await c.query('SELECT pg_advisory_xact_lock($1)', [second]);
        return who;
      });
    expect(await Promise.all([run('a', 1, 2), run('b', 2, 1)])).toEqual(['a', 'b']);
    expect(attempts.a + attempts.b).toBe(3);
    // The victim's first attempt was rolled back: one row each.
    const { rows } = await pool.query<{ who: string }>('SELECT who FROM marks ORDER BY who');
    expect(rows.map((r) => r.who)).toEqual(['a', 'b']);
  });

  it('any other failure rolls back and is thrown at once', async () => {
    let attempts = 0;
    const err = await inTransaction(pool, async (c) => {
      attempts++;
      await c.query("INSERT INTO marks VALUES ('c')");
      await c.query('SELECT 1/0');
    }).catch((e: unknown) => e);
    expect((err as { code?: string }).code).toBe('22012');
    expect(attempts).toBe(1);
    expect(await countOf(pool, "SELECT count(*)::int AS n FROM marks WHERE who = 'c'")).toBe(0);
  });
});
