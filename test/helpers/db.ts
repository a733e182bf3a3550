// Reading the database in tests: counts of rows a request must (not) have changed.
import type pg from 'pg';

/** The integer `n` a query selects (`SELECT count(*)::int AS n ...`, say) in its one row. */
export async function countOf(db: Pick<pg.Pool, 'query'>, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await db.query<{ n: number }>(sql, params);
  return rows[0]!.n;
}
