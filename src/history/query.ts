// The operators of GET /history/device/{id}/history (decisions.md "History") as the query the
// repository runs: lastN (newest first), firstN (oldest first; wins over lastN), dateFrom / dateTo
// (inclusive; ISO 8601, or epoch milliseconds), attr (one label, several comma-separated or
// repeated, or none). lastN/firstN of 0 or absent mean "all", capped at HISTORY_MAX_RESULTS.
// The values arrive checked and typed by the route's query schema (src/history/routes.ts),
// which also answers a bad operator value (400) before the handler runs.
import { microsToText } from '../time.js';
import { timestampOf } from '../schemas/queries.js';
import type { QueryValues } from '../schemas/validator.js';

export interface HistoryQuery {
  /** Labels asked for; undefined: all of the device's attributes. */
  attrs: string[] | undefined;
  /** Exactly one label written: the answer is an array, not an object (`attr=t,t` is two). */
  single: boolean;
  order: 'asc' | 'desc';
  limit: number;
  /** Bounds as timestamptz text (UTC, microseconds). */
  from: string | undefined;
  to: string | undefined;
  /** The same bounds in µs since the epoch (where a read walks the closed region). */
  fromUs: number | undefined;
  toUs: number | undefined;
}

/** A bound the schema accepted (format `timestamp`), in µs; blank: none. `lower`: dateFrom (see timestampOf). */
function boundUs(text: unknown, lower = false): number | undefined {
  return typeof text === 'string' ? timestampOf(text, lower) : undefined;
}

/**
 * `attr` values, each split at commas: trimmed, blanks dropped, each label once, in order;
 * `given` counts every label as written, so `attr=t,t` (or `attr=t&attr=t`) is "several".
 */
function labelsOf(values: unknown): { labels: string[]; given: number } | undefined {
  if (values === undefined) return undefined;
  const labels = new Set<string>();
  let given = 0;
  for (const value of values as string[]) {
    for (const part of value.split(',')) {
      const label = part.trim();
      if (label === '') continue;
      labels.add(label);
      given++;
    }
  }
  return labels.size > 0 ? { labels: [...labels], given } : undefined;
}

/** The validated query values of GET /history as the repository's query. */
export function historyQueryOf(q: QueryValues, maxResults: number): HistoryQuery {
  const firstN = q.firstN as number | undefined;
  const n = firstN ?? (q.lastN as number | undefined);
  const attrs = labelsOf(q.attr);
  const fromUs = boundUs(q.dateFrom, true);
  const toUs = boundUs(q.dateTo);
  return {
    attrs: attrs?.labels,
    single: attrs?.given === 1,
    order: firstN !== undefined ? 'asc' : 'desc',
    limit: n === undefined || n === 0 ? maxResults : n,
    from: fromUs === undefined ? undefined : microsToText(fromUs),
    to: toUs === undefined ? undefined : microsToText(toUs),
    fromUs,
    toUs,
  };
}
