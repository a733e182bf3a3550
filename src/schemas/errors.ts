// The schema of every error body, derived from the error registry itself (src/errors.ts), so the
// document cannot drift from what the code throws: each factory is called once with a marker in
// place of its arguments; fixed text becomes `const`, text around the marker a `pattern`
// (`^No such template: .*$`), and every object is closed (`additionalProperties: false`).
// Configured limits are filled in (`page_size must be at most 1000`). The validation body
// (`failed to parse input`) has a hand-written schema: its field errors nest.
import { errors, type ErrorKey } from '../errors.js';
import { ref } from './responses.js';

export interface ErrorLimits {
  maxPageSize: number;
  maxDeviceCount: number;
  maxBodyBytes: number;
}

const MARK = '\u0001';
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function schemaOf(value: unknown): object {
  if (typeof value === 'string') {
    if (value === MARK) return { type: 'string' };
    return value.includes(MARK) ? { type: 'string', pattern: '^' + value.split(MARK).map(escape).join('.*') + '$' } : { const: value };
  }
  if (Array.isArray(value)) return { type: 'array', minItems: 1, items: schemaOf(value[0]) };
  if (typeof value === 'object' && value !== null) {
    const properties = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, schemaOf(v)]));
    return { type: 'object', required: Object.keys(properties), properties, additionalProperties: false };
  }
  return { const: value };
}

/** Arguments other than the marker: limits (configured) and lists. */
const args = (l: ErrorLimits): Partial<Record<ErrorKey, unknown[]>> => ({
  pageSizeTooLarge: [l.maxPageSize],
  countTooLarge: [l.maxDeviceCount],
  bodyTooLarge: [l.maxBodyBytes],
  notConfigurable: [[MARK]],
  methodNotAllowed: [[MARK]],
});

/** The component name of an error body. */
export const errorSchemaName = (key: ErrorKey) => `Error.${key}`;

/** Every error body schema, by component name (the validation body, `Error.validation`, written here); plus `FieldErrors`. */
export function errorSchemas(l: ErrorLimits): Record<string, object> {
  const out: Record<string, object> = {};
  const special = args(l);
  for (const key of Object.keys(errors) as ErrorKey[]) {
    if (key === 'validation') continue;
    const make = errors[key] as (...a: unknown[]) => { body: unknown };
    const e = make(...(special[key] ?? Array.from({ length: make.length }, () => MARK)));
    out[errorSchemaName(key)] = schemaOf(e.body);
  }
  out.FieldErrors = {
    type: 'object',
    description: 'Field -> ["<text>"], nested for lists and objects: `{"templates": {"1": ["Not a valid integer."]}}`.',
    additionalProperties: { anyOf: [{ type: 'array', items: { type: 'string' } }, ref('FieldErrors')] },
  };
  out[errorSchemaName('validation')] = {
    type: 'object',
    required: ['message', 'errors'],
    properties: {
      message: {
        enum: ['failed to parse input', 'failed to parse attr'],
        description: '`failed to parse attr`: one attribute of a template body.',
      },
      errors: ref('FieldErrors'),
    },
    additionalProperties: false,
    description: 'The validation body: no `status` key.',
  };
  return out;
}
