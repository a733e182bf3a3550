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

/** Whether `v` holds a number beyond a double (JSON.parse reads `1e400` as Infinity). */
function holdsNonFinite(v: unknown): boolean {
  let found = false;
  JSON.stringify(v, (_key, value: unknown) => {
    if (typeof value === 'number' && !Number.isFinite(value)) found = true;
    return value;
  });
  return found;
}

const anyJson: Converter = (v) => {
  try {
    const text = JSON.stringify(v);
    // JSON.stringify writes Infinity as null: a number beyond a double would be stored as null,
    // not as what the device sent, so it does not fit. Only text with a null can hold one.
    if (text.includes('null') && holdsNonFinite(v)) return undefined;
    return text;
  } catch {
    return undefined; // nested deeper than the stack allows (JSON.parse took it, stringify cannot)
  }
};

const CONVERTERS: Record<string, Converter> = { float, integer, bool, string, geopoint };

/** The converter of a value_type; types without a rule take any JSON value. */
export function converterFor(valueType: string): Converter {
  return CONVERTERS[valueType] ?? anyJson;
}
