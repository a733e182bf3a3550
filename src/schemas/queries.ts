// Query parameters shared by several routes (decisions.md "Common"): paging, list filters,
// flags. Each route declares its query as one object schema beside its handler (`query` of
// src/http/types.ts `RouteDecl`), built from these with the configured limits; it is compiled
// once at start (src/schemas/validator.ts `compileQuery`) and shows as the operation's
// parameters in the OpenAPI document (src/openapi/document.ts).
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
import type { ErrorKey } from '../errors.js';
import { parseTimestamp } from '../time.js';

/**
 * History bounds (decisions.md "History"): ISO 8601 date and time, or epoch milliseconds; blank:
 * no bound. `lower`: an inclusive lower bound, whose digits past the microsecond round up.
 */
export const timestampOf = (text: string, lower = false): number | undefined => parseTimestamp(text.trim(), 'bound', lower);

export const queryFormats = {
  timestamp: (text: string) => text.trim() === '' || timestampOf(text) !== undefined,
};

export interface QueryLimits {
  maxPageSize: number;
  maxDeviceCount: number;
  historyMaxResults: number;
  historyMaxBuckets: number;
}

/** The paging errors, in the contract's check order. */
export const PAGE_ERRORS: ErrorKey[] = ['pagingNotIntegers', 'pageNumTooSmall', 'pageSizeTooSmall', 'pageSizeTooLarge'];
/** The filter errors of the list endpoints, after the page's. */
export const FILTER_ERRORS: ErrorKey[] = ['attrFilterWithoutValue', 'badQuery'];

/**
 * How often `attr` / `attr_type` may be repeated in one list request. Each repetition is one more
 * condition the planner joins; PostgreSQL's plan search grows so fast with them that a few
 * hundred ran a backend out of memory (measured: 48 take ~0.2 s, 500 exhaust 18 GB).
 */
const MAX_FILTERS = 16;

const tooManyFilters = (name: string) => ({
  maxItems: { error: 'badQuery', message: `At most {limit} ${name} filters are allowed in one request` },
});

export const pageParams = (l: QueryLimits) => ({
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

export const flag = (description: string) => ({
  type: 'boolean',
  default: false,
  description: `${description} \`true\`, \`1\` (any case) or the bare flag (\`?name\`) are true; any other value is false.`,
});

/** label / attr / attr_type / sortBy of the list endpoints; `attrType`: GET /internal/device has none. */
export const filterParams = (attrType: boolean) => ({
  label: { type: 'string', description: 'Labels that start or end with this text (case-sensitive, literal; no wildcards).' },
  attr: {
    type: 'array',
    maxItems: MAX_FILTERS,
    // The same filter twice is one condition: it counts once towards the limit.
    'x-unique': true,
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
          'x-unique': true,
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
