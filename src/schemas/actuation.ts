// PUT /device/{id}/actuate (decisions.md "Actuation"). The device is looked up first (404);
// src/registry/actuation validates the body against this schema after that (the route reads it
// `json-deferred`). Every failure is the contract's one 400.
import { bodySchema } from './validator.js';

export const actuationBody = bodySchema({
  $id: 'actuation.body',
  type: 'object',
  required: ['attrs'],
  properties: {
    attrs: {
      type: 'object',
      description: 'Attribute label -> new value. Every label must be an `actuator` attribute of the device (else 403).',
      'x-error': 'actuationBodyNotObject',
    },
    topic: { description: 'Carried by the reference body; ignored, whatever its value.' },
  },
  'x-error': 'actuationBodyNotObject',
  'x-error-order': ['actuationBodyNotObject'],
});
