// The device body of POST and PUT /device (decisions.md "Devices"), checked by
// src/registry/devices/input.ts.
import { noNul, staticValueSchema } from './templates.js';
import { bodySchema } from './validator.js';

// Template ids: integers or numeric strings, with an optional sign (decisions.md "Devices").
const idRef = { type: ['integer', 'string'], pattern: '^[-+]?[0-9]+$', 'x-message': 'Not a valid integer.' };

/** One entry of the override list (`attrs` of POST/PUT /device); other keys are ignored. */
const override = {
  type: 'object',
  required: ['label'],
  properties: {
    id: { ...idRef, description: 'The attribute id (found within `template_id` when given); without it the entry is found by `label`.' },
    // Any text: an id that is no template of the device (`"abc"` included) answers
    // `Unknown template <tid> in attr list` from the service, not a validation body.
    template_id: { type: ['integer', 'string'] },
    // An empty label names no attribute either: missing.
    label: {
      type: 'string',
      minLength: 1,
      allOf: [noNul],
      'x-error': { required: 'missingOverrideLabel', minLength: 'missingOverrideLabel' },
    },
    static_value: staticValueSchema,
    metadata: {
      type: 'array',
      items: { type: 'object', required: ['id'], properties: { id: idRef, static_value: staticValueSchema } },
    },
  },
};

const deviceFields = {
  label: { type: 'string', minLength: 1, maxLength: 128, allOf: [noNul] },
  templates: { type: 'array', items: idRef, description: 'Template ids (integers or numeric strings); may be empty.' },
  attrs: {
    type: 'array',
    items: override,
    description: "The override list: the device's own `static_value` of template attributes and their metadata.",
  },
};

/** POST /device. Checked: this body, then `id` (its own message), then the override list. */
export const deviceCreateBody = bodySchema({
  $id: 'devices.create',
  type: 'object',
  required: ['label', 'templates'],
  properties: {
    ...deviceFields,
    id: {
      type: ['string', 'null'],
      pattern: '^[0-9a-fA-F]{2,6}$',
      description: 'A client-chosen device id (single creation only), stored as given.',
      'x-error': 'badDeviceId',
    },
  },
  'x-error-order': ['badDeviceId', 'missingOverrideLabel'],
});

/** PUT /device/{id}: the same without `id` (a device answer sent back carries one; it is ignored). */
export const deviceUpdateBody = bodySchema({
  $id: 'devices.update',
  type: 'object',
  required: ['label', 'templates'],
  properties: deviceFields,
  'x-error-order': ['missingOverrideLabel'],
});
