// The query parameters of every route, one object schema per operation (decisions.md "Common",
// "Devices", "Pre-shared keys", "History"). They are compiled once at start with the configured
// limits (src/schemas/validator.ts `compileQueries`) and are the parameters of the OpenAPI
// document (src/openapi/document.ts).
//
// Query values arrive as text. Before ajv sees them, each is converted by the type its schema
// declares: `integer` when it is decimal digits with an optional sign (blanks around allowed),
// else left as text so that the type check fails; `boolean` by the flag rule (`true`, `1`, any
// case, or the bare `?name` are true, anything else false; never an error); `array`: every value
// of a repeated parameter; otherwise the first value. With `x-lenient`, a value outside `enum`
// counts as absent (the default applies). Defaults are filled in.
//
// `x-error` maps a failing parameter to the contract's error (a key of `errors` in
// src/errors.ts; one key, or one per failing keyword); an error whose factory takes a message gets
// it as a template (`{"error": "badHistoryQuery", "message": "lastN must be at most {limit}, got
// {value}"}`: `{value}` the value as checked, `{input}` the parameter's text as sent, `{limit}`
// the keyword's limit). `x-error-order` lists those errors in the order the contract checks
// them: a request failing several checks gets the first (the same error: the first parameter).
//
// Formats of our own (`queryFormats`): `timestamp`.
import { parseTimestamp } from '../time.js';
import type { NamedSchema } from './index.js';

/** History bounds (decisions.md "History"): ISO 8601 date and time, or epoch milliseconds; blank: no bound. */
export const timestampOf = (text: string): number | undefined => parseTimestamp(text.trim());

export const queryFormats = {
  timestamp: (text: string) => text.trim() === '' || timestampOf(text) !== undefined,
};

export interface QueryLimits {
  maxPageSize: number;
  maxDeviceCount: number;
  historyMaxResults: number;
}

const PAGE_ERRORS = ['pagingNotIntegers', 'pageNumTooSmall', 'pageSizeTooSmall', 'pageSizeTooLarge'];
/** The filter errors of the list endpoints, after the page's. */
const FILTER_ERRORS = ['attrFilterWithoutValue', 'badQuery'];

/**
 * How often `attr` / `attr_type` may be repeated in one list request. Each repetition is one more
 * condition the planner joins; PostgreSQL's plan search grows so fast with them that a few
 * hundred ran a backend out of memory (measured: 48 take ~0.2 s, 500 exhaust 18 GB).
 */
export const MAX_FILTERS = 16;

const tooManyFilters = (name: string) => ({
  maxItems: { error: 'badQuery', message: `At most {limit} ${name} filters are allowed in one request` },
});

const pageParams = (l: QueryLimits) => ({
  page_num: {
    type: 'integer',
    minimum: 1,
    default: 1,
    description: 'Page number.',
    'x-error': { type: 'pagingNotIntegers', minimum: 'pageNumTooSmall' },
  },
  page_size: {
    type: 'integer',
    minimum: 1,
    maximum: l.maxPageSize,
    default: 20,
    description: `Entries per page (at most ${l.maxPageSize}, MAX_PAGE_SIZE).`,
    'x-error': { type: 'pagingNotIntegers', minimum: 'pageSizeTooSmall', maximum: 'pageSizeTooLarge' },
  },
});

const flag = (description: string) => ({
  type: 'boolean',
  default: false,
  description: `${description} \`true\`, \`1\` (any case) or the bare flag (\`?name\`) are true; any other value is false.`,
});

/** label / attr / attr_type / sortBy of the list endpoints; `attrType`: GET /internal/device has none. */
const filterParams = (attrType: boolean) => ({
  label: { type: 'string', description: 'Labels that start or end with this text (case-sensitive, literal; no wildcards).' },
  attr: {
    type: 'array',
    maxItems: MAX_FILTERS,
    items: {
      type: 'string',
      pattern: '=',
      'x-error': 'attrFilterWithoutValue',
    },
    default: [],
    'x-error': tooManyFilters('attr'),
    description:
      '`<label>=<value>` (split at the first `=`): an attribute with that label whose value equals `value` (for devices, the ' +
      `device's override when it has one). Repeatable (at most ${MAX_FILTERS} times); several must all hold.`,
  },
  ...(attrType
    ? {
        attr_type: {
          type: 'array',
          maxItems: MAX_FILTERS,
          items: { type: 'string' },
          default: [],
          'x-error': tooManyFilters('attr_type'),
          description: `An attribute whose \`type\` or \`value_type\` equals it. Repeatable (at most ${MAX_FILTERS} times); several must all hold.`,
        },
      }
    : {}),
  sortBy: {
    type: 'string',
    enum: ['label'],
    'x-lenient': true,
    description: '`label`: label ascending, ties by id. Absent or any other value: by id ascending.',
  },
});

const idsOnly = {
  ...flag('Answer every matching id (filters apply) as an array; page_size and page_num are then not read.'),
  'x-ignores': ['page_num', 'page_size'],
};

const attrFormat = {
  type: 'string',
  enum: ['both', 'single', 'split'],
  default: 'both',
  'x-lenient': true,
  description: '`both`: attrs, data_attrs and config_attrs; `single`: attrs only; `split`: data_attrs and config_attrs only. Any other value means `both`.',
};

/** lastN / firstN of GET /history: the contract's 400 names the operator and what was sent. */
const historyCount = (name: 'lastN' | 'firstN', max: number, description: string) => {
  const notCount = { error: 'badHistoryQuery', message: `${name} must be a non-negative integer, got "{input}"` };
  return {
    type: 'integer',
    minimum: 0,
    maximum: max,
    description,
    'x-error': { type: notCount, minimum: notCount, maximum: { error: 'badHistoryQuery', message: `${name} must be at most {limit}, got {value}` } },
  };
};

const historyBound = (name: 'dateFrom' | 'dateTo', description: string) => ({
  type: 'string',
  format: 'timestamp',
  description: `${description} ISO 8601 date and time (no zone: UTC), or epoch milliseconds; blank: no bound.`,
  'x-error': {
    format: { error: 'badHistoryQuery', message: `${name} must be an ISO 8601 date and time (e.g. 2024-05-01T12:00:00Z), got "{input}"` },
  },
});

/** Every query schema, by id; the ids are what operations name (src/openapi/operations.ts). */
export function querySchemas(l: QueryLimits) {
  return {
    'templates.list': {
      type: 'object',
      properties: { ...pageParams(l), attr_format: attrFormat, ...filterParams(true) },
      'x-error-order': [...PAGE_ERRORS, ...FILTER_ERRORS],
    },
    'templates.get': {
      type: 'object',
      properties: { attr_format: attrFormat },
    },
    'devices.create': {
      type: 'object',
      properties: {
        count: {
          type: 'integer',
          minimum: 1,
          maximum: l.maxDeviceCount,
          default: 1,
          description: `Number of devices to create (at most ${l.maxDeviceCount}, MAX_DEVICE_COUNT), labelled \`<label>_0\` … \`<label>_<count-1>\`, in one transaction.`,
          'x-error': { type: 'countNotInteger', minimum: 'countNotInteger', maximum: 'countTooLarge' },
        },
        verbose: flag('Answer the full device (single creation only).'),
      },
      'x-error-order': ['countNotInteger', 'countTooLarge'],
    },
    'devices.list': {
      type: 'object',
      properties: {
        ...pageParams(l),
        idsOnly: idsOnly,
        ...filterParams(true),
      },
      'x-error-order': [...PAGE_ERRORS, ...FILTER_ERRORS],
    },
    'devices.internalList': {
      type: 'object',
      properties: {
        ...pageParams(l),
        idsOnly: idsOnly,
        ...filterParams(false),
      },
      'x-error-order': [...PAGE_ERRORS, ...FILTER_ERRORS],
    },
    'devices.byTemplate': {
      type: 'object',
      properties: pageParams(l),
      'x-error-order': PAGE_ERRORS,
    },
    'psk.generate': {
      type: 'object',
      required: ['key_length'],
      properties: {
        key_length: {
          type: 'integer',
          minimum: 1,
          maximum: 1023,
          description: 'Key length in bytes. Its presence is checked first, its range after the device (404).',
          'x-error': { required: 'missingKeyLength', type: 'badKeyLength', minimum: 'badKeyLength', maximum: 'badKeyLength' },
        },
        attrs: {
          type: 'array',
          items: { type: 'string' },
          description:
            'Attribute labels, comma-separated or repeated (trimmed; a label given twice gets one key). Absent or empty: every `psk` attribute of the device.',
        },
      },
      'x-error-order': ['missingKeyLength', 'badKeyLength'],
    },
    'psk.copy': {
      type: 'object',
      required: ['from_dev_id', 'from_attr_label'],
      properties: {
        from_dev_id: { type: 'string', minLength: 1, description: 'The source device.', 'x-error': 'copyMissingSource' },
        from_attr_label: { type: 'string', minLength: 1, description: 'The source attribute.', 'x-error': 'copyMissingSource' },
      },
      'x-error-order': ['copyMissingSource'],
    },
    'history.query': {
      type: 'object',
      properties: {
        lastN: historyCount('lastN', l.historyMaxResults, `The last N values, newest first. 0 or absent: all (at most ${l.historyMaxResults}, HISTORY_MAX_RESULTS).`),
        firstN: historyCount('firstN', l.historyMaxResults, 'The first N values, oldest first; wins over lastN.'),
        dateFrom: historyBound('dateFrom', 'Inclusive lower bound:'),
        dateTo: historyBound('dateTo', 'Inclusive upper bound:'),
        attr: {
          type: 'array',
          items: { type: 'string' },
          description:
            'Attribute labels, comma-separated or repeated. One label: an array of records. Several, or none: an object ' +
            '`{label: [records]}` (none: every attribute of the device, `[]` where there is no value).',
        },
      },
      'x-error-order': ['badHistoryQuery'],
    },
  } satisfies Record<string, Omit<NamedSchema, '$id'>>;
}

export type QueryId = keyof ReturnType<typeof querySchemas>;
