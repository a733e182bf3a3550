// One ajv instance holds every request schema of the API (src/schemas/*), compiled once at
// start. A failure becomes the contract's validation body: field -> ["<text>"], nested like
// marshmallow (`{"templates": {"1": ["Not a valid integer."]}}`).
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { errors, type FieldErrors } from '../errors.js';
import { allSchemas } from './index.js';

const TYPE_TEXT: Record<string, string> = {
  string: 'Not a valid string.',
  integer: 'Not a valid integer.',
  number: 'Not a valid number.',
  boolean: 'Not a valid boolean.',
  array: 'Not a valid list.',
  object: 'Invalid input type.',
};

// Union types (`["integer", "string"]`) are how the contract's "ints or numeric strings" are written.
const ajv = new Ajv({ allErrors: true, verbose: true, strict: true, allowUnionTypes: true, keywords: ['x-message'] });
for (const schema of allSchemas) ajv.addSchema(schema);

const compiled = new Map<string, ValidateFunction>();
for (const schema of allSchemas) compiled.set(schema.$id, ajv.getSchema(schema.$id)!);

function text(e: ErrorObject): string {
  const custom = (e.parentSchema as { 'x-message'?: string } | undefined)?.['x-message'];
  switch (e.keyword) {
    case 'required':
      return 'Missing data for required field.';
    case 'type': {
      const t = Array.isArray(e.params.type) ? e.params.type[0] : e.params.type;
      return TYPE_TEXT[t as string] ?? 'Invalid value.';
    }
    case 'maxLength':
      return custom ?? `Longer than maximum length ${e.params.limit}.`;
    case 'minLength':
      return custom ?? `Shorter than minimum length ${e.params.limit}.`;
    case 'pattern':
      return custom ?? 'String does not match expected pattern.';
    case 'enum':
      return `Must be one of: ${(e.params.allowedValues as unknown[]).join(', ')}.`;
    case 'minimum':
      return `Must be greater than or equal to ${e.params.limit}.`;
    case 'maximum':
      return `Must be less than or equal to ${e.params.limit}.`;
    default:
      return custom ?? e.message ?? 'Invalid value.';
  }
}

/** Adds `text` at `path` (`["metadata", "0", "label"]`), nesting objects like marshmallow. */
export function addFieldError(out: FieldErrors, path: string[], text: string): void {
  let node = out as Record<string, unknown>;
  for (const seg of path.slice(0, -1)) {
    const next = node[seg];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[seg] = {};
    node = node[seg] as Record<string, unknown>;
  }
  const leaf = path[path.length - 1]!;
  const list = Array.isArray(node[leaf]) ? (node[leaf] as string[]) : ((node[leaf] = []) as string[]);
  if (!list.includes(text)) list.push(text);
}

/** Turns ajv errors into nested field errors. `required` names the missing child field. */
export function fieldErrors(errs: ErrorObject[]): FieldErrors {
  const out: FieldErrors = {};
  for (const e of errs) {
    const path = e.instancePath.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    if (e.keyword === 'required') path.push(e.params.missingProperty as string);
    if (path.length === 0) path.push('_schema');
    addFieldError(out, path, text(e));
  }
  return out;
}

/** The field errors of `data` against the schema `$id`, or undefined when it is valid. */
export function check(schemaId: string, data: unknown): FieldErrors | undefined {
  const fn = compiled.get(schemaId);
  if (!fn) throw new Error(`no schema ${schemaId}`);
  return fn(data) ? undefined : fieldErrors(fn.errors ?? []);
}

/** Validates `data` against the schema `$id`; throws the contract's 400 validation error. */
export function validate<T>(schemaId: string, data: unknown, message = 'failed to parse input'): T {
  const errs = check(schemaId, data);
  if (errs) throw errors.validation(errs, message);
  return data as T;
}

export function schemaById(schemaId: string): object {
  const s = allSchemas.find((x) => x.$id === schemaId);
  if (!s) throw new Error(`no schema ${schemaId}`);
  return s;
}
