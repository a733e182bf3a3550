// The operators of GET /history/device/{id}/history (decisions.md "History"), parsed and
// checked: lastN (newest first), firstN (oldest first; wins over lastN), dateFrom / dateTo
// (inclusive; ISO 8601, or epoch milliseconds), attr (one label, several comma-separated or
// repeated, or none). lastN/firstN of 0 or absent mean "all", capped at HISTORY_MAX_RESULTS.
import { errors } from '../errors.js';
import { microsToText, parseTimestamp } from '../ingest/values.js';

export interface HistoryQuery {
  /** Labels asked for; undefined: all of the device's attributes. */
  attrs: string[] | undefined;
  /** One label asked for: the answer is an array, not an object. */
  single: boolean;
  order: 'asc' | 'desc';
  limit: number;
  /** Bounds as timestamptz text (UTC, microseconds). */
  from: string | undefined;
  to: string | undefined;
}

function count(q: URLSearchParams, name: string, max: number): number | undefined {
  const raw = q.get(name);
  if (raw === null) return undefined;
  if (!/^\d+$/.test(raw.trim())) throw errors.badHistoryQuery(`${name} must be a non-negative integer, got "${raw}"`);
  const n = Number(raw.trim());
  if (n > max) throw errors.badHistoryQuery(`${name} must be at most ${max}, got ${n}`);
  return n;
}

function date(q: URLSearchParams, name: string): string | undefined {
  const raw = q.get(name);
  if (raw === null || raw.trim() === '') return undefined;
  const us = parseTimestamp(raw.trim());
  if (us === undefined) throw errors.badHistoryQuery(`${name} must be an ISO 8601 date and time (e.g. 2024-05-01T12:00:00Z), got "${raw}"`);
  return microsToText(us);
}

export function parseHistoryQuery(q: URLSearchParams, maxResults: number): HistoryQuery {
  const lastN = count(q, 'lastN', maxResults);
  const firstN = count(q, 'firstN', maxResults);
  const from = date(q, 'dateFrom');
  const to = date(q, 'dateTo');
  const labels = [...new Set(q.getAll('attr').flatMap((a) => a.split(',')).map((a) => a.trim()).filter((a) => a !== ''))];
  const order = firstN !== undefined ? 'asc' : 'desc';
  const n = firstN ?? lastN;
  return {
    attrs: labels.length > 0 ? labels : undefined,
    single: labels.length === 1,
    order,
    limit: n === undefined || n === 0 ? maxResults : n,
    from,
    to,
  };
}
