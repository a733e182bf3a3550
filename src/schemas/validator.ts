// ajv for every request schema of the API, in the JSON Schema dialect of OpenAPI 3.1 (2020-12),
// so the schemas that check requests are the ones the document shows. A body schema is compiled
// when its module declares it (`bodySchema`); a route's query schema once at start, with the
// configured limits (`compileQuery`, from src/http/route.ts `queryChecks`).
//
// A failure becomes the contract's answer: the validation body (field -> ["<text>"], nested like
// marshmallow: `{"templates": {"1": ["Not a valid integer."]}}`), or, where a schema maps the
// failing keyword to an error of src/errors.ts with `x-error`, that error (the first in the
// schema's `x-error-order` when several fail; the validation body comes before them). A mapping
// may carry the message (`{"error": "badHistoryQuery", "message": "lastN must be at most {limit},
// got {value}"}`) for errors whose factory takes one.
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import { ApiError, errors, type ErrorKey, type FieldErrors } from '../errors.js';
import { queryFormats } from './queries.js';

/** Our annotations (see src/schemas/queries.ts); ajv ignores them, strict mode knows them. */
const ANNOTATIONS = ['x-message', 'x-error', 'x-error-order', 'x-lenient', 'x-ignores', 'x-unique'] as const;

const TYPE_TEXT: Record<string, string> = {
  string: 'Not a valid string.',
  integer: 'Not a valid integer.',
  number: 'Not a valid number.',
  boolean: 'Not a valid boolean.',
  array: 'Not a valid list.',
  object: 'Invalid input type.',
};

// Union types (`["integer", "string"]`) are how the contract's "ints or numeric strings" are written.
const newAjv = (useDefaults: boolean) =>
  new Ajv2020({
    allErrors: true,
    verbose: true,
    strict: true,
    allowUnionTypes: true,
    useDefaults,
    keywords: [...ANNOTATIONS],
    formats: queryFormats,
  });

const bodyAjv = newAjv(false);
const queryAjv = newAjv(true);

/** A JSON Schema named as the document's component `#/components/schemas/<$id>`. */
export interface NamedSchema {
  $id: string;
  [keyword: string]: unknown;
}

const bodyValidators = new WeakMap<object, ValidateFunction>();

/**
 * Declares a request body schema: compiled here, once, when its module loads. `validate` and
 * `check` take it; a route's body declaration names it, and the document shows it as a
 * component under its `$id` (ajv refuses a second schema with the same `$id`).
 */
export function bodySchema<S extends NamedSchema>(schema: S): S {
  checkAnnotations(schema.$id, schema);
  bodyValidators.set(schema, bodyAjv.compile(schema));
  return schema;
}

/** True for a schema declared with `bodySchema`. */
export const isBodySchema = (value: object): value is NamedSchema => bodyValidators.has(value);

function text(e: ErrorObject): string {
  const custom = (e.parentSchema as { 'x-message'?: string } | undefined)?.['x-message'];
  switch (e.keyword) {
    case 'required':
      return 'Missing data for required field.';
    case 'type': {
      // marshmallow's words for a null where a value is required, as for the other type errors
      if (e.data === null && e.instancePath !== '') return 'Field may not be null.';
      // ajv's params are untyped; a `type` error's is the type name, or the list of them.
      const type = e.params.type as string | string[];
      const t = Array.isArray(type) ? type[0]! : type;
      return TYPE_TEXT[t] ?? 'Invalid value.';
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
function addFieldError(out: FieldErrors, path: string[], text: string): void {
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

const pathOf = (e: ErrorObject) =>
  e.instancePath
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));

/** Turns ajv errors into nested field errors. `required` names the missing child field. */
export function fieldErrors(errs: ErrorObject[]): FieldErrors {
  const out: FieldErrors = {};
  for (const e of errs) {
    if (e.keyword === 'if') continue; // its `then` failure is reported on its own
    const path = pathOf(e);
    if (e.keyword === 'required') path.push(e.params.missingProperty as string);
    if (path.length === 0) path.push('_schema');
    addFieldError(out, path, text(e));
  }
  return out;
}

/** `x-error`: a registry key, or per failing keyword a key or a key with its message template. */
type Mapping = string | { error: string; message: string };
type ErrorSpec = string | Record<string, Mapping> | undefined;
type SchemaNode = { properties?: Record<string, { 'x-error'?: ErrorSpec }>; 'x-error'?: ErrorSpec };

interface Mapped {
  key: ErrorKey;
  /** A message template: `{value}` the value as checked (after conversion), `{input}` the parameter's text as sent, `{limit}` the keyword's limit, `{property}` the field `additionalProperties` refused. */
  message: string | undefined;
}

function mapped(m: Mapping | undefined): Mapped | undefined {
  if (m === undefined) return undefined;
  return typeof m === 'string' ? { key: m as ErrorKey, message: undefined } : { key: m.error as ErrorKey, message: m.message };
}

/** The errors-registry mapping of a failure (`x-error` of the failing schema), if any. */
function mappingOf(e: ErrorObject): Mapped | undefined {
  const parent = e.parentSchema as SchemaNode | undefined;
  const pick = (spec: ErrorSpec) => mapped(spec === undefined || typeof spec === 'string' ? spec : spec[e.keyword]);
  // A missing property: the property's own mapping, else the object's.
  if (e.keyword === 'required')
    return pick(parent?.properties?.[e.params.missingProperty as string]?.['x-error']) ?? pick(parent?.['x-error']);
  return pick(parent?.['x-error']);
}

/** A value as its message shows it; one too deep for JSON.stringify (thousands of levels) is named, not shown. */
function asText(v: unknown): string {
  if (typeof v === 'string') return v;
  try {
    return JSON.stringify(v);
  } catch {
    return '(a value nested too deeply to show)';
  }
}

/**
 * The registry error for a mapped failure: its message template filled in, else a limit goes to
 * the factory (`page_size must be at most 1000`), else the value. `input`: the text as sent.
 */
function contractError(m: Mapped, e: ErrorObject, input?: string): ApiError {
  const make = errors[m.key] as (arg?: unknown) => ApiError;
  if (m.message !== undefined) {
    // Each variable made only when the message uses it (the value may be large).
    const vars: Record<string, () => string> = {
      value: () => asText(e.data),
      input: () => input ?? asText(e.data),
      limit: () => String(e.params.limit),
      property: () => JSON.stringify(e.params.additionalProperty),
    };
    return make(m.message.replace(/\{(value|input|limit|property)\}/g, (_, name: string) => vars[name]!()));
  }
  return make(e.keyword === 'maximum' || e.keyword === 'minimum' ? e.params.limit : e.data);
}

/** The first mapped failure in the schema's `x-error-order`. */
function firstMapped(order: readonly string[], errs: ErrorObject[]): { error: ErrorObject; mapping: Mapped } | undefined {
  let best: { error: ErrorObject; mapping: Mapped; rank: number } | undefined;
  for (const e of errs) {
    const mapping = mappingOf(e);
    if (mapping === undefined) continue;
    const rank = order.indexOf(mapping.key);
    if (!best || rank < best.rank) best = { error: e, mapping, rank };
  }
  return best;
}

/** Start-time check: every `x-error` names a registry error listed in the schema's `x-error-order`. */
function checkAnnotations(id: string, schema: object): void {
  const order = (schema as { 'x-error-order'?: string[] })['x-error-order'] ?? [];
  for (const key of order) if (!(key in errors)) throw new Error(`schema ${id}: x-error-order names ${key}, not in src/errors.ts`);
  const walk = (node: unknown): void => {
    if (typeof node !== 'object' || node === null) return;
    if (Array.isArray(node)) return node.forEach(walk);
    const spec = (node as { 'x-error'?: ErrorSpec })['x-error'];
    for (const m of spec === undefined ? [] : typeof spec === 'string' ? [spec] : Object.values(spec)) {
      const key = mapped(m)!.key;
      if (!order.includes(key)) throw new Error(`schema ${id}: x-error ${key} is not in its x-error-order`);
    }
    for (const [k, child] of Object.entries(node)) if (k !== 'x-error') walk(child);
  };
  walk(schema);
}

function bodyValidator(schema: NamedSchema): ValidateFunction {
  const fn = bodyValidators.get(schema);
  if (!fn) throw new Error(`schema ${schema.$id} was not declared with bodySchema()`);
  return fn;
}

/** The field errors of `data` against the schema, or undefined when it is valid. */
export function check(schema: NamedSchema, data: unknown): FieldErrors | undefined {
  const fn = bodyValidator(schema);
  return fn(data) ? undefined : fieldErrors(fn.errors ?? []);
}

/** Validates `data` against the schema; throws the contract's 400 validation error, or a mapped error. */
export function validate<T>(schema: NamedSchema, data: unknown, message = 'failed to parse input'): T {
  const fn = bodyValidator(schema);
  if (fn(data)) return data as T;
  const errs = fn.errors ?? [];
  const plain = errs.filter((e) => mappingOf(e) === undefined);
  if (plain.length > 0) throw errors.validation(fieldErrors(plain), message);
  const order = (schema['x-error-order'] as string[] | undefined) ?? [];
  const first = firstMapped(order, errs)!;
  throw contractError(first.mapping, first.error);
}

// ---- Queries ----

/**
 * A route's query parameters as one object schema (the route declares it; shared parameters:
 * src/schemas/queries.ts). Values arrive as text and are converted by the type each parameter
 * declares before ajv sees them (`QueryCheck.run`); `x-lenient`, `x-ignores`, `x-error` and
 * `x-error-order` are described there.
 */
export interface QuerySchema {
  type: 'object';
  required?: string[];
  properties: Record<string, QueryParam>;
  'x-error-order'?: string[];
}

export interface QueryParam {
  type?: string;
  enum?: unknown[];
  description?: string;
  /** Values outside `enum` count as absent (the default applies). */
  'x-lenient'?: boolean;
  /** A flag's: parameters not read when it is true (`idsOnly`: the page). */
  'x-ignores'?: string[];
  /** An array's: a value given more than once counts once (before the checks, `maxItems` included). */
  'x-unique'?: boolean;
  [keyword: string]: unknown;
}

/** A validated query: every declared parameter converted, defaults filled in. */
export type QueryValues = Readonly<Record<string, unknown>>;

export interface QueryFailure {
  error: ApiError;
  /** The parameter and the ajv keyword that failed (`required`: the parameter is absent). */
  param: string;
  keyword: string;
}

export interface QueryResult {
  values: QueryValues;
  failure: QueryFailure | undefined;
}

const INTEGER = /^\s*[+-]?\d+\s*$/;

interface ParamSpec {
  name: string;
  type: string | undefined;
  /** `x-lenient`: values outside this list count as absent. */
  lenient: ReadonlySet<unknown> | undefined;
  /** `x-ignores` of a flag: parameters not read when it is true (`idsOnly`: the page). */
  ignores: string[] | undefined;
  /** `x-unique` of an array: repeated values count once. */
  unique: boolean;
}

/** One route's query: text -> declared types, then its schema. */
export class QueryCheck {
  private readonly params: ParamSpec[];
  private readonly order: readonly string[];

  constructor(
    readonly id: string,
    private readonly fn: ValidateFunction,
    schema: QuerySchema,
  ) {
    this.params = Object.entries(schema.properties).map(([name, p]) => ({
      name,
      type: p.type,
      lenient: p['x-lenient'] && p.enum ? new Set(p.enum) : undefined,
      ignores: p['x-ignores'],
      unique: p['x-unique'] === true,
    }));
    this.order = schema['x-error-order'] ?? [];
  }

  run(query: URLSearchParams): QueryResult {
    const values: Record<string, unknown> = {};
    for (const p of this.params) {
      if (p.type === 'array') {
        const all = query.getAll(p.name);
        if (all.length > 0) values[p.name] = p.unique ? [...new Set(all)] : all;
        continue;
      }
      const raw = query.get(p.name);
      if (raw === null) continue;
      if (p.type === 'integer') {
        // Beyond 2^53 a number is no longer exact (a page would be echoed as another): not an integer here.
        const n = INTEGER.test(raw) ? Number(raw) : NaN;
        values[p.name] = Number.isSafeInteger(n) ? n : raw;
      } else if (p.type === 'boolean') values[p.name] = isTrue(raw);
      else if (!p.lenient || p.lenient.has(raw)) values[p.name] = raw;
    }
    for (const p of this.params) if (p.ignores && values[p.name] === true) for (const name of p.ignores) delete values[name];
    if (this.fn(values)) return { values, failure: undefined };
    return { values, failure: this.failure(this.fn.errors ?? [], query) };
  }

  private failure(errs: ErrorObject[], query: URLSearchParams): QueryFailure {
    const first = firstMapped(this.order, errs);
    if (first) {
      const e = first.error;
      const param = e.keyword === 'required' ? (e.params.missingProperty as string) : (pathOf(e)[0] ?? '');
      // The text as sent: an item of a repeated parameter is its own text already.
      const single = this.params.find((p) => p.name === param)?.type !== 'array';
      const input = single ? (query.get(param) ?? undefined) : undefined;
      return { error: contractError(first.mapping, e, input), param, keyword: e.keyword };
    }
    // Not expected: every parameter that can fail maps to a contract error.
    const e = errs[0]!;
    const param = pathOf(e)[0] ?? (e.params.missingProperty as string | undefined) ?? '';
    return { error: errors.badQuery(`Invalid query parameter ${param}: ${text(e)}`), param, keyword: e.keyword };
  }
}

/** `true`, `1` (any case) or the bare flag (`?idsOnly`). */
function isTrue(raw: string): boolean {
  const s = raw.trim().toLowerCase();
  return s === '' || s === 'true' || s === '1';
}

/** A route's query schema (its limits filled in), compiled; `id` names it in start errors. */
export function compileQuery(id: string, schema: QuerySchema): QueryCheck {
  checkAnnotations(id, schema);
  return new QueryCheck(id, queryAjv.compile(schema), schema);
}
