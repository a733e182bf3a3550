// The bodies external brokers send to the internal listener (src/http/broker-auth-routes.ts),
// in the formats they speak: EMQX 5's HTTP authenticator and authorizer (the JSON body
// configured as docs/operations.md shows), VerneMQ's webhooks (their fixed payloads). Keys the
// brokers add are ignored; a body without the keys needed answers a `{message, status}` 400,
// which both brokers treat as "no answer" (EMQX: ignore; VerneMQ: an error, the client is refused).
import { bodySchema } from './validator.js';

const text = { type: ['string', 'null'] };
const bad = (message: string) => ({ error: 'brokerHookBadBody', message });
const needs = (fields: string[], message: string) => ({
  type: 'object',
  required: fields,
  'x-error': { type: bad(message), required: bad(message) },
  'x-error-order': ['brokerHookBadBody'],
});

export const emqxAuthenticateBody = bodySchema({
  $id: 'broker.emqx.authenticate',
  ...needs(
    ['username'],
    'The body must be a JSON object with a username key (clientid, password, peerhost and cert_common_name as EMQX sends them may be added)',
  ),
  properties: {
    clientid: { ...text, description: '`${clientid}`' },
    username: { ...text, description: '`${username}`: `<tenant>:<device_id>` for devices.' },
    password: { ...text, description: '`${password}`' },
    peerhost: { ...text, description: '`${peerhost}`: the client address (failed logins are throttled by it).' },
    cert_common_name: {
      ...text,
      description: '`${cert_common_name}`: the CN of a client certificate EMQX verified, `<tenant>:<device_id>`.',
    },
  },
});

export const emqxAuthorizeBody = bodySchema({
  $id: 'broker.emqx.authorize',
  ...needs(
    ['username', 'topic', 'action'],
    'The body must be a JSON object with username, topic and action keys (and clientid as EMQX sends it)',
  ),
  properties: {
    clientid: { ...text, description: '`${clientid}`' },
    username: { ...text, description: '`${username}`' },
    topic: { type: 'string', description: '`${topic}`' },
    action: { type: 'string', description: '`${action}`: `publish` or `subscribe`.' },
    cert_common_name: {
      ...text,
      description: '`${cert_common_name}`: the CN of the client certificate, for a device logged in by certificate alone.',
    },
  },
});

export const vernemqRegisterBody = bodySchema({
  $id: 'broker.vernemq.auth_on_register',
  ...needs(['client_id'], 'The body must be the JSON object of VerneMQ’s auth_on_register hook'),
  properties: {
    peer_addr: text,
    peer_port: { type: ['integer', 'null'] },
    username: text,
    password: text,
    mountpoint: text,
    client_id: { type: 'string' },
    clean_session: { type: ['boolean', 'null'] },
  },
});

export const vernemqPublishBody = bodySchema({
  $id: 'broker.vernemq.auth_on_publish',
  ...needs(['client_id', 'topic'], 'The body must be the JSON object of VerneMQ’s auth_on_publish hook'),
  properties: {
    username: text,
    client_id: { type: 'string' },
    mountpoint: text,
    qos: { type: ['integer', 'null'] },
    topic: { type: 'string' },
    payload: text,
    retain: { type: ['boolean', 'null'] },
  },
});

export const vernemqSubscribeBody = bodySchema({
  $id: 'broker.vernemq.auth_on_subscribe',
  ...needs(['client_id', 'topics'], 'The body must be the JSON object of VerneMQ’s auth_on_subscribe hook'),
  properties: {
    username: text,
    client_id: { type: 'string' },
    mountpoint: text,
    topics: {
      type: 'array',
      items: { type: 'object', required: ['topic', 'qos'], properties: { topic: { type: 'string' }, qos: { type: 'integer' } } },
    },
  },
});

const object = (properties: Record<string, unknown>, required: string[]) => ({
  type: 'object',
  required,
  properties,
  additionalProperties: false,
});

export const emqxAnswer = object(
  {
    result: {
      enum: ['allow', 'deny', 'ignore'],
      description: '`ignore`: not a device (the service’s own account): the next authenticator or source decides.',
    },
    is_superuser: { const: false },
    expire_at: { type: 'integer', description: 'When the credential expires (Unix seconds): EMQX 5.8+ disconnects the client then.' },
  },
  ['result'],
);

// anyOf: `{"result": "ok"}` also matches the topics form's required fields but one.
export const vernemqAnswer = {
  anyOf: [
    object({ result: { enum: ['ok', 'next'] } }, ['result']),
    object({ result: object({ error: { const: 'not_allowed' } }, ['error']) }, ['result']),
    object(
      {
        result: { const: 'ok' },
        topics: {
          type: 'array',
          description: 'What auth_on_subscribe reads.',
          items: object({ topic: { type: 'string' }, qos: { type: 'integer', description: '128: refused.' } }, ['topic', 'qos']),
        },
        modifiers: object(
          {
            topics: {
              type: 'array',
              description: 'What auth_on_subscribe_m5 reads: a granted topic as asked (with its MQTT 5 options), a refused one with 135.',
              items: {
                type: 'object',
                required: ['topic', 'qos'],
                properties: { topic: { type: 'string' }, qos: { type: 'integer', description: '135: refused (Not authorized).' } },
              },
            },
          },
          ['topics'],
        ),
      },
      ['result', 'topics', 'modifiers'],
    ),
  ],
};
