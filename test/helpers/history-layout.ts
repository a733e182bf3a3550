// Which history layout the test database gets (sql/020_history.sql decides the same way: the
// timescaledb extension available and preloaded). Tests assert the documented behaviour of
// the layout they run on; TimescaleDB-only checks say so in their names and, when the
// extension is absent, print one line saying they were not run.
import pg from 'pg';
import { inject } from 'vitest';

let cached: Promise<boolean> | undefined;

/** Whether databases created by this run get the TimescaleDB layout. */
export function timescaleLayout(): Promise<boolean> {
  cached ??= (async () => {
    const client = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
    await client.connect();
    try {
      const { rows } = await client.query<{ ts: boolean }>(
        `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb')
                AND coalesce(current_setting('shared_preload_libraries', true), '') LIKE '%timescaledb%' AS ts`,
      );
      return rows[0]!.ts;
    } finally {
      await client.end();
    }
  })();
  return cached;
}

/** TimescaleDB's license setting on the test server (`timescale`: community, `apache`: the Apache-only build); null without TimescaleDB. */
export async function timescaleLicense(): Promise<string | null> {
  if (!(await timescaleLayout())) return null;
  const client = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await client.connect();
  try {
    const { rows } = await client.query<{ license: string | null }>(`SELECT current_setting('timescaledb.license', true) AS license`);
    return rows[0]!.license ?? 'timescale';
  } finally {
    await client.end();
  }
}

/** The title suffix of a TimescaleDB-only block, and a line in the output when it does not run. */
export function timescaleOnly(file: string, has: boolean): string {
  if (!has)
    process.stdout.write(
      `[${file}] TimescaleDB-only checks NOT RUN: this PostgreSQL has no TimescaleDB preloaded (run the suite with TEST_DATABASE_URL pointing at one; docs/operations.md)\n`,
    );
  return has ? '(TimescaleDB)' : '(TimescaleDB only: NOT RUN, this PostgreSQL has no TimescaleDB)';
}
