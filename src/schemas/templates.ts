// The template body of POST and PUT /template (decisions.md "Templates"), checked by
// src/registry/templates/input.ts: the body, then each attribute on its own.
import { bodySchema } from './validator.js';

// Lengths and the label rule: decisions.md "Common" / "Templates". The label's length and
// pattern are separate subschemas so that each failure gets its own text.
const attrLabelSchema = {
  type: 'string',
  allOf: [{ maxLength: 128 }, { pattern: '^[A-Za-z0-9_-]+$', 'x-message': 'Labels must contain letters, numbers or dashes(-_)' }],
};
/** PostgreSQL text cannot hold NUL: refuse it in free text instead of failing in the database. */
export const noNul = { pattern: '^[^\\u0000]*$', 'x-message': 'Must not contain the NUL character.' };
const kind = { type: 'string', minLength: 1, maxLength: 32, allOf: [noNul] };
/** Scalars are stored as text; objects and arrays are refused. */
export const staticValueSchema = { type: ['string', 'number', 'boolean'], maxLength: 128, allOf: [noNul] };

const attrFields = {
  label: attrLabelSchema,
  type: kind,
  value_type: kind,
  static_value: staticValueSchema,
};

/**
 * A `static` attribute needs `static_value`, except a `psk` one (its key is generated later).
 * (`properties` in `then` for ajv's strict mode; `unevaluatedProperties: true` says what JSON
 * Schema means anyway, for linters that read a subschema with `properties` as closed.)
 */
const staticNeedsValue = {
  if: { required: ['type'], properties: { type: { const: 'static' }, value_type: { not: { const: 'psk' } } } },
  then: { required: ['static_value'], properties: { static_value: true }, unevaluatedProperties: true },
};

/** A POST/PUT /template body; each attribute is checked on its own (`templateAttrBody`). */
export const templateBody = bodySchema({
  $id: 'templates.body',
  type: 'object',
  required: ['label'],
  properties: {
    label: { type: 'string', minLength: 1, maxLength: 128, allOf: [noNul] },
    // Each attribute is checked on its own (`templates.attr`, message "failed to parse attr"),
    // also one that is not an object (`{"_schema": ["Invalid input type."]}`).
    attrs: { type: 'array' },
    // Seconds without a stored message after which a device of this template is offline (docs/live.md).
    offline_after: { type: ['integer', 'null'], minimum: 1, maximum: 31_536_000 },
  },
});

/** One attribute of a template body (message `failed to parse attr`). */
export const templateAttrBody = bodySchema({
  $id: 'templates.attr',
  type: 'object',
  required: ['label', 'type', 'value_type'],
  properties: {
    ...attrFields,
    metadata: {
      type: 'array',
      items: { type: 'object', required: ['label', 'type', 'value_type'], properties: attrFields, ...staticNeedsValue },
    },
  },
  ...staticNeedsValue,
});
