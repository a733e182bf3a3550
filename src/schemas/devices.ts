import type { NamedSchema } from './index.js';
import { noNul, staticValueSchema } from './templates.js';

// Template ids: integers or numeric strings (decisions.md "Devices").
const idRef = { type: ['integer', 'string'], pattern: '^[0-9]+$', 'x-message': 'Not a valid integer.' };

/** One entry of the override list (`attrs` of POST/PUT /device); other keys are ignored. */
const override = {
  type: 'object',
  properties: {
    id: idRef,
    template_id: idRef,
    label: { type: 'string', allOf: [noNul] },
    static_value: staticValueSchema,
    metadata: {
      type: 'array',
      items: { type: 'object', required: ['id'], properties: { id: idRef, static_value: staticValueSchema } },
    },
  },
};

export const deviceSchemas: NamedSchema[] = [
  {
    $id: 'devices.body',
    type: 'object',
    required: ['label', 'templates'],
    properties: {
      label: { type: 'string', minLength: 1, maxLength: 128, allOf: [noNul] },
      templates: { type: 'array', items: idRef },
      // `id` has its own message (errors.badDeviceId), checked by the device rules.
      attrs: { type: 'array', items: override },
    },
  },
];
