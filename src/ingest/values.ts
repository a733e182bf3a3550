// Value rules of device messages (decisions.md "Device messages (MQTT)"): a value must fit its
// attribute's value_type, and is stored as JSON text. A converter returns the JSON text to
// store, or undefined when the value does not fit (the value is dropped as `wrong_type`).

export type Converter = (value: unknown) => string | undefined;

const NUMERIC = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;
const GEOPOINT = /^\s*([+-]?\d+(?:\.\d+)?)\s*,\s*([+-]?\d+(?:\.\d+)?)\s*$/;

function toNumber(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value === 'string' && NUMERIC.test(value)) {
    const n = Number(value);
    return Number.isFinite(n) ? n : undefined;
  }
  return undefined;
}

const float: Converter = (v) => {
  const n = toNumber(v);
  return n === undefined ? undefined : String(n);
};

const integer: Converter = (v) => {
  const n = toNumber(v);
  return n === undefined || !Number.isInteger(n) ? undefined : String(n);
};

const bool: Converter = (v) => (typeof v === 'boolean' ? (v ? 'true' : 'false') : undefined);

const string: Converter = (v) => (typeof v === 'string' ? JSON.stringify(v) : undefined);

const geopoint: Converter = (v) => {
  if (typeof v !== 'string') return undefined;
  const m = GEOPOINT.exec(v);
  if (!m) return undefined;
  const lat = Number(m[1]);
  const lon = Number(m[2]);
  if (Math.abs(lat) > 90 || Math.abs(lon) > 180) return undefined;
  return JSON.stringify(v);
};

const anyJson: Converter = (v) => {
  try {
    return JSON.stringify(v);
  } catch {
    return undefined; // nested deeper than the stack allows (JSON.parse took it, stringify cannot)
  }
};

const CONVERTERS: Record<string, Converter> = { float, integer, bool, string, geopoint };

/** The converter of a value_type; types without a rule take any JSON value. */
export function converterFor(valueType: string): Converter {
  return CONVERTERS[valueType] ?? anyJson;
}

// ---- timestamps ---------------------------------------------------------------------------

/** Latest accepted timestamp: the end of year 9999 (PostgreSQL and JS both handle it). */
const MAX_MS = 253402300799999;
const ISO =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?$/;

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/**
 * The `timestamp` key of a message: epoch milliseconds (a number or a string of digits) or
 * ISO 8601 (no zone means UTC). Returns microseconds since the epoch, or undefined.
 */
export function parseTimestamp(value: unknown): number | undefined {
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
  if (year < 1970 || month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return undefined;
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
  const ms = Date.UTC(year, month - 1, day, Number(h), Number(mi), Number(s)) - offsetMin * 60_000;
  const micros = Number((frac + '000000').slice(0, 6));
  const us = ms * 1000 + micros;
  return us >= 0 && us <= MAX_MS * 1000 ? us : undefined;
}

/** Microseconds since the epoch as PostgreSQL timestamptz text (UTC, six fractional digits). */
export function microsToText(us: number): string {
  const ms = Math.floor(us / 1000);
  const iso = new Date(ms).toISOString(); // 2024-01-02T03:04:05.678Z
  const micro = us - ms * 1000;
  return iso.slice(0, 23) + (micro < 10 ? '00' : micro < 100 ? '0' : '') + micro + 'Z';
}
