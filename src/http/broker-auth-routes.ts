// External brokers ask the registry who may log in as a device and what it may do
// (docs/operations.md §2), on the internal listener, in the HTTP formats clustered brokers speak:
//   - EMQX 5: the HTTP authenticator (`allow` / `deny` / `ignore`, and `expire_at` when the
//     credential expires) and the HTTP authorizer (`allow` / `deny` / `ignore`);
//   - VerneMQ: the webhooks auth_on_register, auth_on_publish, auth_on_subscribe (`ok`, `next`,
//     `{"error": "not_allowed"}`, or per-topic QoS 128 for refused subscriptions).
// The login is the registry's decision (src/registry/credentials/logins.ts, MQTT_DEVICE_AUTH),
// the topics are the embedded broker's rules (src/broker/topic-rules.ts): one source of truth.
// A client that names no device (the service's own account) is not ours to judge: `ignore` /
// `next` hand it to the broker's other authenticators and sources.
// No token: the brokers cannot hold one. The internal listener must be reachable only by the
// platform (INTERNAL_HOST).
import { mayPublish, maySubscribe } from '../broker/topic-rules.js';
import { parseDeviceName, sameDevice, type DeviceRef } from '../topics.js';
import { err } from '../openapi/examples.js';
import type { DeviceLogins } from '../registry/credentials/logins.js';
import {
  emqxAnswer,
  emqxAuthenticateBody,
  emqxAuthorizeBody,
  vernemqAnswer,
  vernemqPublishBody,
  vernemqRegisterBody,
  vernemqSubscribeBody,
} from '../schemas/broker-hooks.js';
import { validate } from '../schemas/validator.js';
import type { Request, ResponseDoc, RouteSpec } from './types.js';

type Deps = { logins: DeviceLogins };

/** The device a broker's client is: its username `<tenant>:<id>`, else its client id of that form (legacy). */
function deviceOf(username: string | null | undefined, clientId: string | null | undefined): DeviceRef | undefined {
  if (username) return parseDeviceName(username);
  return clientId ? parseDeviceName(clientId) : undefined;
}

const password = (p: string | null | undefined) => (p ? Buffer.from(p, 'utf8') : undefined);

/**
 * A client id `<tenant>:<device_id>` belongs to the device it names (docs/credentials.md §3,
 * "Client ids"; not with MQTT_DEVICE_AUTH=off): another device logging in with it would take
 * over that device's connection and session (its subscriptions, its queued config messages).
 * Refused before the registry is asked, logged and not counted, as on the embedded broker.
 */
function takesOver(
  logins: DeviceLogins,
  device: DeviceRef,
  client: { clientId: string | null | undefined; address: string | null | undefined },
  req: Request,
): boolean {
  const { clientId, address } = client;
  const named = logins.mode === 'off' || !clientId ? undefined : parseDeviceName(clientId);
  if (!named || sameDevice(named, device)) return false;
  req.logger().info('device login refused', {
    tenant: device.tenant,
    device: device.id,
    reason: 'the client id belongs to another device',
    address: address ?? undefined,
  });
  return true;
}

const NOT_ALLOWED = { result: { error: 'not_allowed' } } as const;
/**
 * The login hooks read the device's credentials (unless cached): with the database away they
 * answer 503 like every route that reads it (the topic hooks read none). Declared here, since the
 * document gives routes without a token only the shutdown's 503 (before, found by an audit,
 * this one was answered and not declared).
 */
const LOGIN_UNAVAILABLE: ResponseDoc = {
  description:
    'The database is unavailable (down, restarting or out of connections) and the device’s credentials are not cached; or the service is shutting down.',
  errors: ['unhealthy'],
};
const hook = (name: string) => ({
  method: 'POST' as const,
  listeners: ['internal' as const],
  auth: false,
  tag: 'broker',
  path: `/broker/vernemq/${name}`,
});
const emqxHook = (name: string) => ({
  method: 'POST' as const,
  listeners: ['internal' as const],
  auth: false,
  tag: 'broker',
  path: `/broker/emqx/${name}`,
});

// The examples' tenant `acme` stands for the example fixture's tenant (test/openapi/examples.test.ts):
// d4e5f6 has no credentials, a1b2c3 has one.
const DEV = 'acme:d4e5f6';

export const brokerAuthRoutes: RouteSpec<Deps>[] = [
  {
    ...emqxHook('authenticate'),
    summary: 'EMQX HTTP authenticator',
    description:
      'EMQX 5 `authentication` mechanism `password_based`, backend `http`, method `post`, body `{"clientid": "${clientid}", "username": "${username}", ' +
      '"password": "${password}", "peerhost": "${peerhost}", "cert_common_name": "${cert_common_name}"}`. A device logs in as MQTT_DEVICE_AUTH says; ' +
      'a username that names no device (and a client id that names none) is `ignore`d; a client id that names another device than the login is `deny` (it would take over that device’s session).',
    body: { read: 'json', schema: emqxAuthenticateBody },
    responses: {
      200: { description: 'The decision.', schema: emqxAnswer },
      400: { description: 'Not the configured body.', errors: ['brokerHookBadBody', 'validation', 'payloadNotJson'] },
      503: LOGIN_UNAVAILABLE,
    },
    examples: [
      {
        name: 'device',
        summary: 'A device without credentials (MQTT_DEVICE_AUTH=optional)',
        body: { clientid: 'sensor-1', username: DEV, password: '', peerhost: '10.0.0.7' },
        status: 200,
        response: { result: 'allow', is_superuser: false },
      },
      {
        name: 'wrong',
        summary: 'A device with a credential, and a wrong password',
        body: { clientid: 'x', username: 'acme:a1b2c3', password: 'guess', peerhost: '10.0.0.8' },
        status: 200,
        response: { result: 'deny' },
      },
      {
        name: 'unknown',
        summary: 'No such device',
        body: { clientid: 'x', username: 'acme:ffffff', password: 'guess', peerhost: '10.0.0.8' },
        status: 200,
        response: { result: 'deny' },
      },
      {
        name: 'service',
        summary: 'The service’s own account',
        body: { clientid: 'device-registry-ingest-0', username: 'device-registry', password: 'its-password', peerhost: '10.0.0.2' },
        status: 200,
        response: { result: 'ignore' },
      },
      {
        name: 'badBody',
        summary: 'No username key',
        body: { clientid: 'x' },
        status: 400,
        response: err(
          'brokerHookBadBody',
          'The body must be a JSON object with a username key (clientid, password, peerhost and cert_common_name as EMQX sends them may be added)',
        ),
      },
    ],
    async handler(req, { logins }) {
      const b = validate<{
        clientid?: string | null;
        username?: string | null;
        password?: string | null;
        peerhost?: string | null;
        cert_common_name?: string | null;
      }>(emqxAuthenticateBody, req.body);
      const certified = b.cert_common_name ? parseDeviceName(b.cert_common_name) : undefined;
      // A username that names no device is another account's (the service's), whatever certificate comes with it.
      const device = b.username ? parseDeviceName(b.username) : (deviceOf(undefined, b.clientid) ?? certified);
      if (!device) return { status: 200, body: { result: 'ignore' } };
      if (certified && !sameDevice(certified, device)) return { status: 200, body: { result: 'deny' } };
      if (takesOver(logins, device, { clientId: b.clientid, address: b.peerhost }, req)) return { status: 200, body: { result: 'deny' } };
      const verdict = await logins.check({
        device,
        password: password(b.password),
        certificate: certified !== undefined,
        address: b.peerhost ?? undefined,
        requestId: req.requestId,
      });
      if (!verdict.ok) return { status: 200, body: { result: 'deny' } };
      const expires = verdict.expiresMs === undefined ? {} : { expire_at: Math.floor(verdict.expiresMs / 1000) };
      return { status: 200, body: { result: 'allow', is_superuser: false, ...expires } };
    },
  },
  {
    ...emqxHook('authorize'),
    summary: 'EMQX HTTP authorizer',
    description:
      'EMQX 5 `authorization` source `http`, method `post`, body `{"clientid": "${clientid}", "username": "${username}", "topic": "${topic}", "action": "${action}"}`. ' +
      'A device may publish to its attrs topic and subscribe to its config topic (both layouts), nothing else; a client that names no device is `ignore`d.',
    body: { read: 'json', schema: emqxAuthorizeBody },
    responses: {
      200: { description: 'The decision.', schema: emqxAnswer },
      400: { description: 'Not the configured body.', errors: ['brokerHookBadBody', 'validation', 'payloadNotJson'] },
    },
    examples: [
      {
        name: 'publish',
        summary: 'Its own attrs topic',
        body: { clientid: 'sensor-1', username: DEV, topic: `${DEV}/attrs`, action: 'publish' },
        status: 200,
        response: { result: 'allow' },
      },
      {
        name: 'legacy',
        summary: 'Its own legacy config topic',
        body: { clientid: 'sensor-1', username: DEV, topic: '/acme/d4e5f6/config', action: 'subscribe' },
        status: 200,
        response: { result: 'allow' },
      },
      {
        name: 'certificate',
        summary: 'A device logged in by client certificate alone',
        body: { clientid: 'sensor-1', username: '', topic: `${DEV}/attrs`, action: 'publish', cert_common_name: DEV },
        status: 200,
        response: { result: 'allow' },
      },
      {
        name: 'other',
        summary: 'Another device’s topic',
        body: { clientid: 'sensor-1', username: DEV, topic: 'acme:a1b2c3/attrs', action: 'publish' },
        status: 200,
        response: { result: 'deny' },
      },
      {
        name: 'service',
        summary: 'The service’s own account',
        body: {
          clientid: 'device-registry-ingest-0',
          username: 'device-registry',
          topic: '$share/device-registry/+/attrs',
          action: 'subscribe',
        },
        status: 200,
        response: { result: 'ignore' },
      },
      {
        name: 'badBody',
        summary: 'No topic key',
        body: { clientid: 'sensor-1', username: DEV, action: 'publish' },
        status: 400,
        response: err(
          'brokerHookBadBody',
          'The body must be a JSON object with username, topic and action keys (and clientid as EMQX sends it)',
        ),
      },
    ],
    handler(req) {
      const b = validate<{
        clientid?: string | null;
        username?: string | null;
        topic: string;
        action: string;
        cert_common_name?: string | null;
      }>(emqxAuthorizeBody, req.body);
      // The device as the authenticator named it (a device logged in by certificate alone is its CN's).
      const certified = b.cert_common_name ? parseDeviceName(b.cert_common_name) : undefined;
      const device = b.username ? parseDeviceName(b.username) : (deviceOf(undefined, b.clientid) ?? certified);
      if (!device) return { status: 200, body: { result: 'ignore' } };
      if (certified && !sameDevice(certified, device)) return { status: 200, body: { result: 'deny' } };
      const allowed =
        b.action === 'publish' ? mayPublish(device, b.topic) : b.action === 'subscribe' ? maySubscribe(device, b.topic) : false;
      return { status: 200, body: { result: allowed ? 'allow' : 'deny' } };
    },
  },
  {
    ...hook('auth_on_register'),
    summary: 'VerneMQ webhook auth_on_register',
    description:
      'A device logs in as MQTT_DEVICE_AUTH says; a client id that names another device than the username is `not_allowed` (it would take over that device’s session); a client that names no device (by username, else client id) is `next`.',
    body: { read: 'json', schema: vernemqRegisterBody },
    responses: {
      200: { description: 'The decision.', schema: vernemqAnswer },
      400: { description: 'Not the hook’s body.', errors: ['brokerHookBadBody', 'validation', 'payloadNotJson'] },
      503: LOGIN_UNAVAILABLE,
    },
    examples: [
      {
        name: 'device',
        summary: 'A device without credentials (MQTT_DEVICE_AUTH=optional)',
        body: {
          peer_addr: '10.0.0.7',
          peer_port: 50312,
          username: DEV,
          password: null,
          mountpoint: '',
          client_id: 'sensor-1',
          clean_session: true,
        },
        status: 200,
        response: { result: 'ok' },
      },
      {
        name: 'unknown',
        summary: 'No such device',
        body: {
          peer_addr: '10.0.0.8',
          peer_port: 50313,
          username: 'acme:ffffff',
          password: 'guess',
          mountpoint: '',
          client_id: 'x',
          clean_session: true,
        },
        status: 200,
        response: NOT_ALLOWED,
      },
      {
        name: 'service',
        summary: 'The service’s own account',
        body: {
          peer_addr: '10.0.0.2',
          peer_port: 50314,
          username: 'device-registry',
          password: 'its-password',
          mountpoint: '',
          client_id: 'device-registry-ingest-0',
          clean_session: false,
        },
        status: 200,
        response: { result: 'next' },
      },
      {
        name: 'badBody',
        summary: 'No client_id key',
        body: { username: DEV },
        status: 400,
        response: err('brokerHookBadBody', 'The body must be the JSON object of VerneMQ’s auth_on_register hook'),
      },
    ],
    async handler(req, { logins }) {
      const b = validate<{ peer_addr?: string | null; username?: string | null; password?: string | null; client_id: string }>(
        vernemqRegisterBody,
        req.body,
      );
      const device = deviceOf(b.username, b.client_id);
      if (!device) return { status: 200, body: { result: 'next' } };
      if (takesOver(logins, device, { clientId: b.client_id, address: b.peer_addr }, req)) return { status: 200, body: NOT_ALLOWED };
      const verdict = await logins.check({
        device,
        password: password(b.password),
        address: b.peer_addr ?? undefined,
        requestId: req.requestId,
      });
      return { status: 200, body: verdict.ok ? { result: 'ok' } : NOT_ALLOWED };
    },
  },
  {
    ...hook('auth_on_publish'),
    summary: 'VerneMQ webhook auth_on_publish',
    description: 'A device may publish to its attrs topic (either layout), nothing else; a client that names no device is `next`.',
    body: { read: 'json', schema: vernemqPublishBody },
    responses: {
      200: { description: 'The decision.', schema: vernemqAnswer },
      400: { description: 'Not the hook’s body.', errors: ['brokerHookBadBody', 'validation', 'payloadNotJson'] },
    },
    examples: [
      {
        name: 'own',
        summary: 'Its own attrs topic',
        body: {
          username: DEV,
          client_id: 'sensor-1',
          mountpoint: '',
          qos: 1,
          topic: `${DEV}/attrs`,
          payload: 'eyJ0IjoxfQ==',
          retain: false,
        },
        status: 200,
        response: { result: 'ok' },
      },
      {
        name: 'other',
        summary: 'Another tenant’s topic',
        body: {
          username: DEV,
          client_id: 'sensor-1',
          mountpoint: '',
          qos: 1,
          topic: 'other:d4e5f6/attrs',
          payload: 'eyJ0IjoxfQ==',
          retain: false,
        },
        status: 200,
        response: NOT_ALLOWED,
      },
      {
        name: 'badBody',
        summary: 'No topic key',
        body: { username: DEV, client_id: 'sensor-1' },
        status: 400,
        response: err('brokerHookBadBody', 'The body must be the JSON object of VerneMQ’s auth_on_publish hook'),
      },
    ],
    handler(req) {
      const b = validate<{ username?: string | null; client_id: string; topic: string }>(vernemqPublishBody, req.body);
      const device = deviceOf(b.username, b.client_id);
      if (!device) return { status: 200, body: { result: 'next' } };
      return { status: 200, body: mayPublish(device, b.topic) ? { result: 'ok' } : NOT_ALLOWED };
    },
  },
  {
    ...hook('auth_on_subscribe'),
    summary: 'VerneMQ webhook auth_on_subscribe',
    description:
      'A device may subscribe to its config topic (either layout): each other topic gets QoS 128 (refused) in `topics`, and reason code 135 in `modifiers.topics` (what `auth_on_subscribe_m5` reads: register this endpoint for both hooks); none allowed: `not_allowed`. A client that names no device is `next`.',
    body: { read: 'json', schema: vernemqSubscribeBody },
    responses: {
      200: { description: 'The decision.', schema: vernemqAnswer },
      400: { description: 'Not the hook’s body.', errors: ['brokerHookBadBody', 'validation', 'payloadNotJson'] },
    },
    examples: [
      {
        name: 'own',
        summary: 'Its own config topics',
        body: {
          username: DEV,
          client_id: 'sensor-1',
          mountpoint: '',
          topics: [
            { topic: `${DEV}/config`, qos: 1 },
            { topic: '/acme/d4e5f6/config', qos: 1 },
          ],
        },
        status: 200,
        response: { result: 'ok' },
      },
      {
        name: 'some',
        summary: 'Its own topic and a wildcard',
        body: {
          username: DEV,
          client_id: 'sensor-1',
          mountpoint: '',
          topics: [
            { topic: `${DEV}/config`, qos: 1 },
            { topic: '#', qos: 0 },
          ],
        },
        status: 200,
        response: {
          result: 'ok',
          topics: [
            { topic: `${DEV}/config`, qos: 1 },
            { topic: '#', qos: 128 },
          ],
          modifiers: {
            topics: [
              { topic: `${DEV}/config`, qos: 1 },
              { topic: '#', qos: 135 },
            ],
          },
        },
      },
      {
        name: 'none',
        summary: 'Only others’ topics',
        body: { username: DEV, client_id: 'sensor-1', mountpoint: '', topics: [{ topic: '+/attrs', qos: 1 }] },
        status: 200,
        response: NOT_ALLOWED,
      },
      {
        name: 'badBody',
        summary: 'No topics key',
        body: { username: DEV, client_id: 'sensor-1' },
        status: 400,
        response: err('brokerHookBadBody', 'The body must be the JSON object of VerneMQ’s auth_on_subscribe hook'),
      },
    ],
    handler(req) {
      // MQTT 5 (auth_on_subscribe_m5): each topic also carries no_local, rap and retain_handling.
      const b = validate<{ username?: string | null; client_id: string; topics: Array<{ topic: string; qos: number }> }>(
        vernemqSubscribeBody,
        req.body,
      );
      const device = deviceOf(b.username, b.client_id);
      if (!device) return { status: 200, body: { result: 'next' } };
      const allowed = b.topics.map((t) => maySubscribe(device, t.topic));
      if (allowed.every(Boolean)) return { status: 200, body: { result: 'ok' } };
      if (!allowed.some(Boolean)) return { status: 200, body: NOT_ALLOWED };
      // Some refused: in both hooks' forms, so that this endpoint may serve auth_on_subscribe_m5
      // too. auth_on_subscribe reads the top-level `topics` (QoS 128: refused);
      // auth_on_subscribe_m5 reads only `modifiers.topics` (reason code 135, Not authorized; a
      // granted topic keeps the options it was asked with), and takes an answer without them as
      // granting every topic.
      const topics = b.topics.map((t, i) => ({ topic: t.topic, qos: allowed[i] ? t.qos : 128 }));
      const m5 = b.topics.map((t, i) => (allowed[i] ? t : { topic: t.topic, qos: 135 }));
      return { status: 200, body: { result: 'ok', topics, modifiers: { topics: m5 } } };
    },
  },
];
