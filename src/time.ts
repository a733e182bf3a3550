// The time rules, in one place (decisions.md "Timestamps", "Device messages (MQTT)", "History"):
//   - parsing: a message's `timestamp` key and a history bound are epoch milliseconds or ISO 8601;
//   - formatting: created/updated as UTC `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`, history `ts` as UTC
//     `...ffffffZ`. PostgreSQL keeps microseconds and JS Dates do not, so queries format
//     timestamps in SQL; ingest formats microseconds itself.
// Times in microseconds since the epoch are plain numbers (exact up to year 2255).

// ---- parsing --------------------------------------------------------------------------------

/** Latest accepted timestamp: the end of year 9999 (PostgreSQL and JS both handle it). */
const MAX_MS = 253402300799999;
/** MAX_MS as text, for messages. */
export const LATEST_TIME = '9999-12-31T23:59:59.999Z';
/** Earliest history bound: 0001-01-01T00:00:00Z. */
const MIN_BOUND_MS = -62135596800000;
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?$/;

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/**
 * The `timestamp` key of a message: epoch milliseconds (a number or a string of digits) or
 * ISO 8601 (no zone means UTC). Returns microseconds since the epoch, or undefined. A stored
 * time is never before 1970; a history bound (`bound`) may be any date from year 1 on.
 * Digits past the microsecond are cut off, or with `roundUp` (an inclusive lower bound: the
 * first microsecond not before it) round up to the next microsecond.
 */
export function parseTimestamp(value: unknown, kind: 'stored' | 'bound' = 'stored', roundUp = false): number | undefined {
  if (typeof value === 'number') {
    return Number.isFinite(value) && value >= 0 && value <= MAX_MS ? Math.round(value * 1000) : undefined;
  }
  if (typeof value !== 'string') return undefined;
  if (/^\d{1,15}$/.test(value)) return parseTimestamp(Number(value));
  const m = ISO.exec(value.trim());
  if (!m) return undefined;
  const [, y, mo, d, h = '0', mi = '0', s = '0', frac = '', zone] = m;
  const year = Number(y);
  const month = Number(mo);
  const day = Number(d);
  if (year < (kind === 'bound' ? 1 : 1970) || month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return undefined;
  if (Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) return undefined;
  let offsetMin = 0;
  if (zone && zone !== 'Z' && zone !== 'z') {
    const sign = zone[0] === '-' ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    const oh = Number(digits.slice(0, 2));
    const om = digits.length > 2 ? Number(digits.slice(2)) : 0;
    if (oh > 23 || om > 59) return undefined;
    offsetMin = sign * (oh * 60 + om);
  }
  // (setUTCFullYear: Date.UTC would read years 0-99 as 1900-1999)
  const ms = new Date(Date.UTC(2000, month - 1, day, Number(h), Number(mi), Number(s))).setUTCFullYear(year) - offsetMin * 60_000;
  const micros = Number((frac + '000000').slice(0, 6)) + (roundUp && /[1-9]/.test(frac.slice(6)) ? 1 : 0);
  const us = ms * 1000 + micros;
  if (us < (kind === 'bound' ? MIN_BOUND_MS * 1000 : 0)) return undefined;
  if (us <= MAX_MS * 1000) return us;
  // A bound may name any microsecond of year 9999's last millisecond (an inclusive end): it
  // means that millisecond, where stored times end (microseconds that late are not exact in a
  // double anyway).
  return kind === 'bound' && ms <= MAX_MS ? MAX_MS * 1000 : undefined;
}

/**
 * An ISO 8601 date and time with its zone, in the forms parseTimestamp reads, as a JSON Schema
 * pattern (a credential's `expires_at`): `T`, `t` or a blank between date and time (RFC 3339
 * allows the last two), an offset of ±hh:mm, ±hhmm or ISO 8601's ±hh.
 */
export const ZONED_TIME_PATTERN = '^\\d{4}-\\d{2}-\\d{2}[Tt ]\\d{2}:\\d{2}(:\\d{2}(\\.\\d+)?)?(Z|z|[+-]\\d{2}(:?\\d{2})?)$';

/**
 * Whether `text`, an ISO 8601 time parseTimestamp refused, names a real time after LATEST_TIME (an
 * offset can take year 9999 past it, and so can a microsecond within its last millisecond, which
 * Date.parse cuts off to that millisecond: refused, it is past LATEST_TIME).
 */
export function afterLatestTime(text: string): boolean {
  // Date.parse does not read ISO 8601's hour-only offset (±hh): it is written ±hh:00 for it.
  return Date.parse(text.replace(/(:\d{2}(?:\.\d+)?[+-]\d{2})$/, '$1:00')) >= MAX_MS;
}

// ---- formatting: history `ts` ---------------------------------------------------------------

/** Microseconds since the epoch as history `ts` text (UTC, six fractional digits); PostgreSQL reads it as timestamptz. */
export function microsToText(us: number): string {
  const ms = Math.floor(us / 1000);
  const iso = new Date(ms).toISOString(); // 2024-01-02T03:04:05.678Z
  const micro = us - ms * 1000;
  return iso.slice(0, 23) + (micro < 10 ? '00' : micro < 100 ? '0' : '') + micro + 'Z';
}

/**
 * microsToText for a stream of times that mostly repeat or stay within a second (ingest: one
 * call per stored message): the part up to the second is formatted once per second.
 */
export function microsToTextCached(): (us: number) => string {
  let lastUs = -1;
  let lastText = '';
  let lastSecond = -1;
  let secondPrefix = '';
  return (us) => {
    if (us === lastUs) return lastText;
    const second = Math.floor(us / 1_000_000);
    if (second !== lastSecond) {
      lastSecond = second;
      secondPrefix = microsToText(second * 1_000_000).slice(0, 20); // 2024-01-02T03:04:05.
    }
    const frac = us - second * 1_000_000;
    lastUs = us;
    lastText = secondPrefix + (frac + 1_000_000).toString().slice(1) + 'Z';
    return lastText;
  };
}

/** The history `ts` text as a JSON Schema pattern (the answers' schemas). */
export const HISTORY_TIME_PATTERN = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{6}Z$';

/** SQL expression rendering a timestamptz column as the contract's history `ts` text. */
export function historyTimeSql(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/**
 * historyTimeSql for a bucket start, which may lie before year 1 (the local midnight of
 * 0001-01-01 in a zone east of UTC, or a fixed-length bucket counted from the epoch): such a
 * time is 1 BC, written as ISO 8601's year 0000 (to_char's YYYY would write 0001, out of order).
 */
export function bucketTimeSql(column: string): string {
  return `CASE WHEN ${column} < '0001-01-01T00:00:00Z' THEN '0000' || to_char(${column} AT TIME ZONE 'UTC', '-MM-DD"T"HH24:MI:SS.US"Z"') ELSE ${historyTimeSql(column)} END`;
}

// ---- formatting: registry created/updated ---------------------------------------------------

/** A JS Date in the created/updated format (microseconds are the milliseconds padded). */
export function registryTime(d: Date): string {
  return d.toISOString().replace('Z', '000+00:00');
}

/** Microseconds since the epoch in the created/updated format (a device's `last_seen`). */
export function microsToRegistryTime(us: number): string {
  return microsToText(us).replace('Z', '+00:00');
}

/** The created/updated text as a JSON Schema pattern (the answers' schemas). */
export const REGISTRY_TIME_PATTERN = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{6}\\+00:00$';

/** SQL expression rendering a timestamptz column as the contract's created/updated text. */
export function registryTimeSql(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')`;
}
