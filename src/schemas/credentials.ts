// POST /device/{id}/credentials and the credential answers (docs/credentials.md). Every body
// failure is a `{message, status}` 400 naming the field; src/registry/credentials/service.ts
// validates against this schema before it looks the device up.
import { REGISTRY_TIME_PATTERN, ZONED_TIME_PATTERN } from '../time.js';
import { bodySchema } from './validator.js';

const MIN_CHOSEN_SECRET = 16;
export const MAX_CHOSEN_SECRET = 256;
/** Every secret is this text: a chosen one by this schema, a generated one (base64url) too. */
export const SECRET_CHARACTERS = '^[\\x21-\\x7e]+$';
/** The 400 of an `expires_at` that is no time: refused by the pattern, or by the service's reading of it. */
export const EXPIRES_AT_UNREADABLE = 'expires_at must be an ISO 8601 date and time with a time zone, such as 2027-01-31T00:00:00Z';

/** The same `{message, status}` 400 for every failing keyword of a field. */
const bad = (message: string, keywords: string[]) => Object.fromEntries(keywords.map((k) => [k, { error: 'credentialBadInput', message }]));

export const credentialCreateBody = bodySchema({
  $id: 'credentials.create',
  type: 'object',
  required: ['type'],
  properties: {
    type: {
      enum: ['password'],
      description: 'The only type: an MQTT password.',
      'x-error': bad('type must be "password"', ['required', 'enum']),
    },
    expires_at: {
      type: ['string', 'null'],
      pattern: ZONED_TIME_PATTERN,
      description: 'ISO 8601 with a time zone offset; in the future. Absent or null (as the answers write it): never expires.',
      'x-error': bad(EXPIRES_AT_UNREADABLE, ['type', 'pattern']),
    },
    secret: {
      type: 'string',
      minLength: MIN_CHOSEN_SECRET,
      maxLength: MAX_CHOSEN_SECRET,
      pattern: SECRET_CHARACTERS,
      description: `A secret the client chose (${MIN_CHOSEN_SECRET} to ${MAX_CHOSEN_SECRET} printable ASCII characters, no spaces), kept as a salted slow hash. Absent: the service generates one.`,
      'x-error': bad(`secret must be ${MIN_CHOSEN_SECRET} to ${MAX_CHOSEN_SECRET} printable ASCII characters without spaces`, [
        'type',
        'minLength',
        'maxLength',
        'pattern',
      ]),
    },
  },
  // A misspelt field is refused, not ignored: {"expiresAt": …} would make a credential that never expires.
  additionalProperties: false,
  'x-error': {
    ...bad('The body must be a JSON object such as {"type": "password"}', ['type']),
    additionalProperties: { error: 'credentialBadInput', message: 'Unknown field {property}: the body takes type, expires_at and secret' },
  },
  'x-error-order': ['credentialBadInput'],
});

const time = { type: 'string', pattern: REGISTRY_TIME_PATTERN };
const nullableTime = { type: ['string', 'null'], pattern: time.pattern };

const metadata = {
  id: {
    type: 'string',
    pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$',
    description: 'The credential id (a UUID).',
  },
  type: { const: 'password' },
  created_at: time,
  expires_at: { ...nullableTime, description: 'null: never expires.' },
};

/** One credential's metadata: never its secret or hash. */
const credentialView = {
  type: 'object',
  required: ['id', 'type', 'created_at', 'expires_at', 'last_used_at'],
  properties: {
    ...metadata,
    last_used_at: { ...nullableTime, description: 'The last login with it (recorded within a few seconds); null: never used.' },
  },
  additionalProperties: false,
};

/** The answer of POST: the only time the secret is shown. */
export const credentialCreated = {
  type: 'object',
  required: ['id', 'type', 'created_at', 'expires_at', 'secret'],
  properties: { ...metadata, secret: { type: 'string', description: 'The MQTT password. Shown here once, never again.' } },
  additionalProperties: false,
};

export const credentialList = { type: 'array', items: credentialView };

export const credentialRemoved = {
  type: 'object',
  required: ['result', 'removed_credential'],
  properties: { result: { const: 'ok' }, removed_credential: credentialView },
  additionalProperties: false,
};
