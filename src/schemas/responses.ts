// The shapes the API answers with (interface.md §2, decisions.md), as JSON Schema 2020-12. They
// are components of the OpenAPI document (`#/components/schemas/<name>`), and the example test
// (test/openapi/examples.test.ts) checks every answer of the running service against them.
// Tight where the contract is exact: required fields, `additionalProperties: false`, the
// template id (integer in create/get/list answers, a string in update/delete answers), the
// actuation key with its leading space. Error bodies: src/schemas/errors.ts.
import { HISTORY_TIME_PATTERN, REGISTRY_TIME_PATTERN } from '../time.js';

export const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** `created` / `updated`: UTC with six fractional digits and `+00:00`. */
const registryTime = {
  type: 'string',
  pattern: REGISTRY_TIME_PATTERN,
  examples: ['2026-05-01T12:00:00.000000+00:00'],
};

/** An attribute view; `mode` device: the device's own value shows with `is_static_overridden`. */
function attribute(mode: 'template' | 'device', nested: boolean): object {
  const props: Record<string, object> = {
    id: { type: 'integer' },
    label: { type: 'string' },
    type: { type: 'string', description: 'Seen: `dynamic`, `static`, `actuator`, `meta`, `mqtt_meta`; other values are stored as given.' },
    value_type: {
      type: 'string',
      description: 'Seen: `float`, `string`, `bool`, `integer`, `geopoint`, `psk`; other values are stored as given.',
    },
    static_value: {
      type: 'string',
      description: 'When set. A `psk` key never shows here in public views; internal views show a generated key.',
    },
  };
  if (mode === 'device')
    props.is_static_overridden = { type: 'boolean', description: 'With `static_value`: true when the device overrides it.' };
  if (!nested) props.template_id = { type: 'string' };
  props.created = ref('RegistryTime');
  props.updated = ref('RegistryTime');
  if (!nested)
    props.metadata = { type: 'array', items: ref(mode === 'device' ? 'DeviceMetadata' : 'Metadata'), description: 'When non-empty.' };
  const required = ['id', 'label', 'type', 'value_type', 'created', ...(nested ? [] : ['template_id'])];
  return { type: 'object', required, properties: props, additionalProperties: false };
}

/** A template view: `format` as attr_format; `idType` integer (create/get/list) or string (update/delete). */
function template(format: 'both' | 'single' | 'split', idType: 'integer' | 'string'): object {
  const lists: Record<string, object> = {};
  if (format !== 'split') lists.attrs = { type: 'array', items: ref('Attribute') };
  if (format !== 'single') {
    lists.data_attrs = { type: 'array', items: ref('Attribute'), description: 'Types `dynamic`, `static`, `actuator`.' };
    lists.config_attrs = { type: 'array', items: ref('Attribute'), description: 'Every other type.' };
  }
  return {
    type: 'object',
    required: ['id', 'label', 'created', ...Object.keys(lists)],
    properties: {
      id: { type: idType },
      label: { type: 'string' },
      created: ref('RegistryTime'),
      updated: ref('RegistryTime'),
      offline_after: {
        type: 'integer',
        minimum: 1,
        description:
          'Seconds without a stored message after which a device of this template is offline; absent when not set (DEVICE_OFFLINE_AFTER_SECONDS applies).',
      },
      ...lists,
    },
    additionalProperties: false,
  };
}

const device = (attr: string) => ({
  type: 'object',
  required: ['id', 'label', 'created', 'templates', 'attrs'],
  properties: {
    id: { type: 'string' },
    label: { type: 'string' },
    created: ref('RegistryTime'),
    updated: { ...ref('RegistryTime'), description: 'Absent until the device is changed by PUT, key generation or key copy.' },
    templates: { type: 'array', items: { type: 'string', pattern: '^[0-9]+$' }, description: 'Template ids as strings.' },
    last_seen: {
      type: ['string', 'null'],
      description:
        'With `withStatus` or `status=` only: when the last stored message of the device was received (RFC 3339, UTC); null if none.',
    },
    status: {
      type: 'string',
      enum: ['online', 'offline'],
      description:
        "With `withStatus` or `status=` only: `online` when the last stored message is more recent than the device's inactivity timeout (docs/live.md).",
    },
    attrs: {
      type: 'object',
      description: 'Template id -> the attributes that came from that template (every template, also one without attributes).',
      propertyNames: { pattern: '^[0-9]+$' },
      additionalProperties: { type: 'array', items: ref(attr) },
    },
  },
  additionalProperties: false,
});

const object = (required: string[], properties: Record<string, unknown>) => ({
  type: 'object',
  required,
  properties,
  additionalProperties: false,
});
const ok = { const: 'ok' };

/** Every response shape, by component name. */
export const responseSchemas = {
  RegistryTime: registryTime,
  Attribute: attribute('template', false),
  Metadata: attribute('template', true),
  DeviceAttribute: attribute('device', false),
  DeviceMetadata: attribute('device', true),
  Template: { ...template('both', 'integer'), description: 'attr_format `both` (default).' },
  TemplateSingle: { ...template('single', 'integer'), description: 'attr_format `single`: attrs only.' },
  TemplateSplit: { ...template('split', 'integer'), description: 'attr_format `split`: data_attrs and config_attrs only.' },
  TemplateInAnyFormat: { oneOf: [ref('Template'), ref('TemplateSingle'), ref('TemplateSplit')] },
  TemplateStringId: { ...template('both', 'string'), description: 'A template in update and delete answers: its id is a string.' },
  Pagination: object(['page', 'total', 'has_next', 'next_page'], {
    page: { type: 'integer', description: 'The requested page.' },
    total: { type: 'integer', description: 'The number of pages: ceil(matches / page_size), 0 when nothing matches.' },
    has_next: { type: 'boolean' },
    next_page: { type: ['integer', 'null'] },
  }),
  Device: { ...device('DeviceAttribute'), description: 'A device. Public views never show a `psk` key.' },
  DeviceWithLastValues: {
    ...device('DeviceAttribute'),
    required: ['id', 'label', 'created', 'templates', 'attrs', 'last_values'],
    properties: {
      ...device('DeviceAttribute').properties,
      last_values: {
        type: 'object',
        description: '`lastValues=true`: attribute label -> its latest value and time; labels without a value are left out.',
        additionalProperties: object(['ts', 'value'], {
          ts: { type: 'string', pattern: HISTORY_TIME_PATTERN },
          value: { description: 'The value as the device sent it (its JSON type kept).' },
        }),
      },
    },
    description: 'A device with `last_values` (`lastValues=true`).',
  },
  InternalDevice: {
    ...device('DeviceAttribute'),
    description: "A device as the internal endpoints show it: a generated key is its attribute's `static_value`.",
  },
  KeyRecord: object(['attribute', 'psk'], {
    attribute: { type: 'string' },
    psk: { type: 'string', pattern: '^[0-9a-f]+$', description: 'key_length random bytes as lowercase hex.' },
  }),
  HistoryRecord: object(['device_id', 'ts', 'value', 'attr'], {
    device_id: { type: 'string' },
    ts: { type: 'string', pattern: HISTORY_TIME_PATTERN, examples: ['2026-05-01T12:00:00.000000Z'] },
    value: { description: 'The value as the device sent it (its JSON type kept).' },
    attr: { type: 'string' },
  }),
  HistoryBucket: object(['ts'], {
    ts: {
      type: 'string',
      pattern: HISTORY_TIME_PATTERN,
      description: 'The bucket start (UTC).',
      examples: ['2026-05-01T12:00:00.000000Z'],
    },
    avg: { type: ['number', 'null'] },
    min: { type: ['number', 'null'] },
    max: { type: ['number', 'null'] },
    sum: { type: ['number', 'null'] },
    count: { type: 'integer', minimum: 0 },
    first: { description: 'The earliest value of the bucket as the device sent it (null: empty bucket, fill=null).' },
    last: { description: 'The latest value of the bucket as the device sent it (null: empty bucket, fill=null).' },
  }),

  // Answers
  Token: object(['jwt'], { jwt: { type: 'string' } }),
  User: object(['id', 'username', 'service', 'profile', 'created'], {
    id: { type: 'integer' },
    username: { type: 'string' },
    service: { type: 'string', description: 'The tenant.' },
    profile: { type: 'string' },
    created: ref('RegistryTime'),
  }),
  Health: object(['status'], { status: { const: 'ok' } }),
  Readiness: object(['status', 'checks'], {
    status: { enum: ['ready', 'not ready'] },
    reasons: {
      type: 'array',
      items: { type: 'string' },
      description: 'When not ready: why, one line per failing check (and `shutting down` during a shutdown).',
    },
    checks: object(['database', 'migrations', 'broker', 'ingest'], {
      database: { type: 'string', description: '`ok`, or why the database did not answer within 2 s.' },
      migrations: { type: 'string', description: '`ok` when every migration of this version is applied, else the missing ones.' },
      broker: {
        type: 'string',
        description: '`ok` while device messages can come in and configuration messages go out, else the connections down.',
      },
      ingest: { type: 'string', description: '`ok`, or `stalled` when messages wait and none was acknowledged for INGEST_STALL_SECONDS.' },
    }),
  }),
  OpenApiDocument: {
    type: 'object',
    required: ['openapi', 'info', 'paths'],
    properties: { openapi: { type: 'string', pattern: '^3\\.1\\.' }, info: { type: 'object' }, paths: { type: 'object' } },
  },
  TemplateCreated: object(['result', 'template'], { result: ok, template: ref('Template') }),
  TemplateList: object(['templates', 'pagination'], {
    templates: { type: 'array', items: ref('TemplateInAnyFormat') },
    pagination: ref('Pagination'),
  }),
  TemplatesRemoved: object(['removed', 'result'], { removed: { type: 'array', items: ref('TemplateStringId') }, result: ok }),
  TemplateUpdated: object(['updated', 'result'], { updated: ref('TemplateStringId'), result: ok }),
  TemplateRemoved: object(['removed', 'result'], { removed: ref('TemplateStringId'), result: ok }),
  DevicesCreated: {
    oneOf: [
      object(['message', 'devices'], {
        message: { const: 'devices created' },
        devices: { type: 'array', items: object(['id', 'label'], { id: { type: 'string' }, label: { type: 'string' } }) },
      }),
      object(['message', 'devices'], {
        message: { const: 'device created' },
        devices: { type: 'array', items: ref('Device'), minItems: 1, maxItems: 1, description: 'verbose=true: the full device.' },
      }),
    ],
  },
  DeviceList: object(['devices', 'pagination'], {
    devices: { type: 'array', items: { anyOf: [ref('Device'), ref('DeviceWithLastValues')] } },
    pagination: ref('Pagination'),
  }),
  InternalDeviceList: object(['devices', 'pagination'], {
    devices: { type: 'array', items: ref('InternalDevice') },
    pagination: ref('Pagination'),
  }),
  DeviceIds: { type: 'array', items: { type: 'string' }, description: 'idsOnly: every matching device id.' },
  DeviceUpdated: object(['message', 'device'], {
    message: { const: 'device updated' },
    device: {
      allOf: [ref('Device'), { type: 'object', properties: { updated: { type: 'string' } }, required: ['updated'] }],
      description: 'The device, with `updated` (a PUT always sets it).',
    },
  }),
  DeviceRemoved: object(['removed_device', 'result'], { removed_device: ref('Device'), result: ok }),
  DevicesRemoved: object(['removed_devices', 'result'], { removed_devices: { type: 'array', items: ref('Device') }, result: ok }),
  KeyRecords: { type: 'array', items: ref('KeyRecord'), minItems: 1 },
  ActuationSent: object([' status'], {
    ' status': { const: 'configuration sent to device', description: 'The key is written with a leading space, as in the reference.' },
  }),
  HistorySeries: { type: 'array', items: ref('HistoryRecord'), description: 'One `attr`: its records.' },
  HistoryByLabel: {
    type: 'object',
    additionalProperties: { type: 'array', items: ref('HistoryRecord') },
    description: 'Several `attr` labels, or none (every attribute of the device): label -> records, `[]` where there are none.',
  },
  HistoryBuckets: { type: 'array', items: ref('HistoryBucket'), description: 'With `interval`, one `attr`: its buckets in time order.' },
  HistoryBucketsByLabel: {
    type: 'object',
    additionalProperties: { type: 'array', items: ref('HistoryBucket') },
    description: 'With `interval`, several `attr` labels or none: label -> buckets, `[]` where there are none.',
  },
} satisfies Record<string, object>;

/** The name of a response component: what a route's `responses` name. */
export type ResponseName = keyof typeof responseSchemas;
