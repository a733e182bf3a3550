// The `tz` of an aggregate read as PostgreSQL must be given it. Two traps: `AT TIME ZONE` reads a
// name it knows as an abbreviation (pg_timezone_abbrevs: CET, EST, ...) as that abbreviation's
// fixed offset before it looks for a zone of that name (CET in summer would be an hour off), and
// Node's ICU also takes Java's legacy three-letter ids (IST, PST, BST, ...) that are no name of
// the tz database (PostgreSQL would read them as abbreviations too). So a `tz` is a zone when
// Node and PostgreSQL's tz database both know the name, and PostgreSQL is given a spelling it
// reads as that zone: the name itself, or, where it is also an abbreviation, Node's canonical
// name for it (CET → Europe/Brussels, EST → America/Panama, GMT → UTC).
import type pg from 'pg';
import { isZoneName } from './buckets.js';

interface Catalogue {
  /** By lower case (both Node and PostgreSQL take a zone name in any case): the catalogue's spelling. */
  names: ReadonlyMap<string, string>;
  /** Lower case: PostgreSQL matches abbreviations without regard to case. */
  abbreviations: ReadonlySet<string>;
}

// Read once per pool (the two views list files and a table: ~50 ms), kept for the process's life.
const catalogues = new WeakMap<pg.Pool, Promise<Catalogue>>();

function catalogueOf(pool: pg.Pool): Promise<Catalogue> {
  let c = catalogues.get(pool);
  if (!c) {
    c = Promise.all([
      pool.query<{ name: string }>('SELECT name FROM pg_timezone_names'),
      pool.query<{ abbrev: string }>('SELECT abbrev FROM pg_timezone_abbrevs'),
    ]).then(([n, a]) => ({
      names: new Map(n.rows.map((r) => [r.name.toLowerCase(), r.name])),
      abbreviations: new Set(a.rows.map((r) => r.abbrev.toLowerCase())),
    }));
    // A failed read is tried again by the next request, not remembered.
    c.catch(() => catalogues.delete(pool));
    catalogues.set(pool, c);
  }
  return c;
}

/** The zone name to give PostgreSQL for `tz`, or undefined when `tz` is not an IANA zone name. */
export async function databaseZone(pool: pg.Pool, tz: string): Promise<string | undefined> {
  if (!isZoneName(tz)) return undefined;
  const { names, abbreviations } = await catalogueOf(pool);
  const name = names.get(tz.toLowerCase());
  if (name === undefined) return undefined;
  if (!abbreviations.has(name.toLowerCase())) return name;
  const canonical = new Intl.DateTimeFormat('en', { timeZone: name }).resolvedOptions().timeZone;
  if (canonical === 'UTC') return 'UTC'; // UTC, GMT, UCT, Zulu: offset 0 however it is read
  return names.get(canonical.toLowerCase()) === canonical && !abbreviations.has(canonical.toLowerCase()) ? canonical : undefined;
}
