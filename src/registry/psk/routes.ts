// Pre-shared key endpoints (interface.md §4.3): HTTP in and out, and what the API description
// says of each. Queries are checked before a handler runs.
import { labelListOf } from '../../http/query.js';
import type { RouteSpec } from '../../http/types.js';
import { DEV, KEY, err } from '../../openapi/examples.js';
import { deviceIdParam } from '../../schemas/params.js';
import type { PskService } from './service.js';

export const pskRoutes: RouteSpec<{ psk: PskService }>[] = [
  {
    method: 'POST',
    path: '/device/gen_psk/:id',
    summary: 'Generate pre-shared keys',
    description:
      'Checked in this order: key_length present, the device (404), key_length in range, the labels. A key is key_length random bytes; ' +
      'it is answered only here and replaces an earlier one. 204 when the device has no `psk` attribute and no `attrs` was given.',
    tag: 'pre-shared keys',
    params: { id: deviceIdParam },
    query: () => ({
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
    }),
    // decisions.md: key_length present, then the device (404), then key_length's range.
    queryFailure: 'handler',
    responses: {
      200: { description: 'The new keys.', schema: 'KeyRecords' },
      204: { description: 'No `psk` attribute: nothing generated.' },
      400: { description: 'Bad key_length or labels.', errors: ['missingKeyLength', 'badKeyLength', 'pskUnknownAttrs', 'pskNotPskAttr'] },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    exampleParams: { id: DEV },
    examples: [
      {
        name: 'generated',
        summary: 'A 16-byte key for `key`',
        query: { key_length: 16, attrs: 'key' },
        status: 200,
        response: [{ attribute: 'key', psk: KEY }],
      },
      { name: 'none', summary: 'A device without psk attributes', params: { id: 'd4e5f6' }, query: { key_length: 16 }, status: 204 },
      { name: 'missing', summary: 'key_length missing', status: 400, response: err('missingKeyLength') },
      { name: 'outOfRange', summary: 'key_length 1024', query: { key_length: 1024 }, status: 400, response: err('badKeyLength') },
      {
        name: 'unknownDevice',
        summary: 'No such device (before the range)',
        params: { id: 'ffffff' },
        query: { key_length: 0 },
        status: 404,
        response: err('noSuchDevice', 'ffffff'),
      },
      {
        name: 'unknownLabel',
        summary: 'An unknown label',
        query: { key_length: 16, attrs: 'key,nope' },
        status: 400,
        response: err('pskUnknownAttrs'),
      },
      {
        name: 'notPsk',
        summary: 'A label that is not psk',
        query: { key_length: 16, attrs: 'serial' },
        status: 400,
        response: err('pskNotPskAttr'),
      },
    ],
    async handler(req, { psk }) {
      if (req.queryFailure?.keyword === 'required') throw req.queryFailure.error;
      const keyLength = req.queryFailure?.error ?? (req.values.key_length as number);
      const keys = await psk.generate(req.tenant, req.params.id!, keyLength, labelListOf(req.values.attrs));
      return keys.length > 0 ? { status: 200, body: keys } : { status: 204 };
    },
  },
  {
    method: 'PUT',
    path: '/device/:id/attrs/:label/psk',
    summary: 'Copy a pre-shared key',
    description:
      'Copies the key of `from_dev_id`/`from_attr_label` to this device attribute; no link is kept. Checked in this order: both query ' +
      'parameters, the source device (404), the source attribute, this device (404), this attribute, a key at the source.',
    tag: 'pre-shared keys',
    params: { id: deviceIdParam, label: { type: 'string', description: 'The destination attribute.' } },
    query: () => ({
      type: 'object',
      required: ['from_dev_id', 'from_attr_label'],
      properties: {
        from_dev_id: { type: 'string', minLength: 1, description: 'The source device.', 'x-error': 'copyMissingSource' },
        from_attr_label: { type: 'string', minLength: 1, description: 'The source attribute.', 'x-error': 'copyMissingSource' },
      },
      'x-error-order': ['copyMissingSource'],
    }),
    responses: {
      204: { description: 'Copied.' },
      400: {
        description: 'Missing parameters, an attribute that is not psk, or no key at the source.',
        errors: ['copyMissingSource', 'copyAttrNotPsk', 'copyNoSourceKey'],
      },
      404: { description: 'No such device or attribute.', errors: ['noSuchDevice', 'copyAttrNotFound'] },
    },
    exampleParams: { id: DEV, label: 'spare' },
    examples: [
      { name: 'copied', summary: 'key -> spare', query: { from_dev_id: DEV, from_attr_label: 'key' }, status: 204 },
      { name: 'missing', summary: 'Source parameters missing', status: 400, response: err('copyMissingSource') },
      {
        name: 'notFound',
        summary: 'No such destination attribute',
        params: { id: DEV, label: 'nope' },
        query: { from_dev_id: DEV, from_attr_label: 'key' },
        status: 404,
        response: err('copyAttrNotFound', 'nope'),
      },
      {
        name: 'notPsk',
        summary: 'Destination not psk',
        params: { id: DEV, label: 'serial' },
        query: { from_dev_id: DEV, from_attr_label: 'key' },
        status: 400,
        response: err('copyAttrNotPsk', 'serial'),
      },
      {
        name: 'noKey',
        summary: 'No key at the source',
        query: { from_dev_id: DEV, from_attr_label: 'spare' },
        status: 400,
        response: err('copyNoSourceKey', 'spare'),
      },
    ],
    async handler(req, { psk }) {
      await psk.copy(req.tenant, req.params.id!, req.params.label!, req.values.from_dev_id as string, req.values.from_attr_label as string);
      return { status: 204 };
    },
  },
];
