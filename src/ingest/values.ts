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
