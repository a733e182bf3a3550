import type { NamedSchema } from './index.js';

// PUT /device/{id}/actuate (decisions.md "Actuation"). The device is looked up first (404);
// src/registry/actuation checks the body after that, with this rule and this error.
export const actuationSchemas: NamedSchema[] = [
  {
    $id: 'actuation.body',
    type: 'object',
    required: ['attrs'],
    properties: {
      attrs: {
        type: 'object',
        description: 'Attribute label -> new value. Every label must be an `actuator` attribute of the device (else 403).',
        'x-error': 'actuationBodyNotObject',
      },
      topic: { type: 'string', description: 'Carried by the reference body; ignored.' },
    },
    'x-error': 'actuationBodyNotObject',
    'x-error-order': ['actuationBodyNotObject'],
  },
];
