// Device credential endpoints (docs/credentials.md): HTTP in and out, and what the API
// description says of each. Tenant scoped like every device route: another tenant's device is
// no such device.
import type { RouteSpec } from '../../http/types.js';
import { CREDENTIAL_ID, DEV, TIME, err } from '../../openapi/examples.js';
import { credentialCreateBody, credentialCreated, credentialList, credentialRemoved } from '../../schemas/credentials.js';
import { deviceIdParam } from '../../schemas/params.js';
import type { CredentialService } from './service.js';

const OTHER_ID = '0b9d8c7a-6e5f-4a3b-9c2d-1e0f9a8b7c6d';
const SECRET = 'Zq3xV9kR2mT7wY4bN8cL1dF6gH0jK5pS';

export const credentialRoutes: RouteSpec<{ credentials: CredentialService }>[] = [
  {
    method: 'POST',
    path: '/device/:id/credentials',
    summary: 'Create a device credential',
    description:
      'A password the device logs in to the broker with (MQTT username `<tenant>:<device_id>`). The service generates the secret (192 random ' +
      'bits, URL-safe) unless the body brings one; the answer is the only place it ever appears. A device holds up to MAX_DEVICE_CREDENTIALS ' +
      '(default 10) at once: rotate by adding one, moving the device to it, deleting the old. Checked in this order: the body, the device ' +
      '(404), the bound.',
    tag: 'credentials',
    params: { id: deviceIdParam },
    body: { read: 'json', schema: credentialCreateBody },
    responses: {
      201: { description: 'Created: its secret, shown this once (sent with `Cache-Control: no-store`).', schema: credentialCreated },
      400: {
        description: 'A bad body, expires_at in the past, or the device holds the most credentials allowed.',
        errors: ['credentialBadInput', 'credentialExpiresInPast', 'credentialLimit', 'payloadNotJson'],
      },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
      503: {
        description: 'MQTT_DYNAMIC_SECURITY: the broker did not take the device account; nothing was created.',
        errors: ['brokerAccountsUnavailable'],
      },
    },
    exampleParams: { id: DEV },
    examples: [
      {
        name: 'generated',
        summary: 'A generated password',
        body: { type: 'password' },
        status: 201,
        response: { id: OTHER_ID, type: 'password', created_at: TIME, expires_at: null, secret: SECRET },
      },
      {
        name: 'expiring',
        summary: 'A generated password that expires',
        body: { type: 'password', expires_at: '2099-12-31T23:59:59Z' },
        status: 201,
        response: { id: OTHER_ID, type: 'password', created_at: TIME, expires_at: '2099-12-31T23:59:59.000000+00:00', secret: SECRET },
      },
      {
        name: 'chosen',
        summary: 'A secret the client chose (kept as a salted slow hash)',
        body: { type: 'password', secret: 'correct-horse-battery-staple' },
        status: 201,
        response: { id: OTHER_ID, type: 'password', created_at: TIME, expires_at: null, secret: 'correct-horse-battery-staple' },
      },
      {
        name: 'badType',
        summary: 'Another type',
        body: { type: 'token' },
        status: 400,
        response: err('credentialBadInput', 'type must be "password"'),
      },
      {
        name: 'shortSecret',
        summary: 'A chosen secret that is too short',
        body: { type: 'password', secret: 'short' },
        status: 400,
        response: err('credentialBadInput', 'secret must be 16 to 256 printable ASCII characters without spaces'),
      },
      {
        name: 'past',
        summary: 'expires_at in the past',
        body: { type: 'password', expires_at: '2020-01-01T00:00:00Z' },
        status: 400,
        response: err('credentialExpiresInPast'),
      },
      {
        name: 'unknown',
        summary: 'No such device',
        params: { id: 'ffffff' },
        body: { type: 'password' },
        status: 404,
        response: err('noSuchDevice', 'ffffff'),
      },
    ],
    async handler(req, { credentials }) {
      // The secret is in this answer only: no cache on the way may keep a copy of it.
      return {
        status: 201,
        body: await credentials.create(req.tenant, req.params.id!, req.body, req.requestId),
        headers: { 'Cache-Control': 'no-store' },
      };
    },
  },
  {
    method: 'GET',
    path: '/device/:id/credentials',
    summary: "List a device's credentials",
    description:
      'Metadata only, oldest first: never a secret or a hash. `last_used_at` is the last login with it, recorded within a few seconds.',
    tag: 'credentials',
    params: { id: deviceIdParam },
    responses: {
      200: { description: 'The credentials.', schema: credentialList },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
    },
    exampleParams: { id: DEV },
    examples: [
      {
        name: 'listed',
        summary: 'The credentials of a1b2c3',
        status: 200,
        response: [{ id: CREDENTIAL_ID, type: 'password', created_at: TIME, expires_at: null, last_used_at: null }],
      },
      { name: 'none', summary: 'A device without credentials', params: { id: 'd4e5f6' }, status: 200, response: [] },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
    async handler(req, { credentials }) {
      return { status: 200, body: await credentials.list(req.tenant, req.params.id!) };
    },
  },
  {
    method: 'DELETE',
    path: '/device/:id/credentials/:credential_id',
    summary: 'Delete a device credential',
    description:
      'The credential no longer logs the device in, and every MQTT connection that logged in with it is closed within a second (embedded ' +
      'broker; with MQTT_DYNAMIC_SECURITY the broker drops its account when it held this one).',
    tag: 'credentials',
    params: { id: deviceIdParam, credential_id: { type: 'string', description: 'A credential id.' } },
    responses: {
      200: { description: 'Deleted: its metadata.', schema: credentialRemoved },
      404: { description: 'No such device, or no such credential of it.', errors: ['noSuchDevice', 'noSuchCredential'] },
      503: {
        description: 'MQTT_DYNAMIC_SECURITY: the broker did not drop the device account; nothing was deleted.',
        errors: ['brokerAccountsUnavailable'],
      },
    },
    exampleParams: { id: DEV, credential_id: CREDENTIAL_ID },
    examples: [
      {
        name: 'deleted',
        summary: 'The credential of a1b2c3',
        status: 200,
        response: {
          result: 'ok',
          removed_credential: { id: CREDENTIAL_ID, type: 'password', created_at: TIME, expires_at: null, last_used_at: null },
        },
      },
      {
        name: 'unknownCredential',
        summary: 'No such credential',
        params: { id: DEV, credential_id: OTHER_ID },
        status: 404,
        response: err('noSuchCredential', OTHER_ID),
      },
      {
        name: 'unknownDevice',
        summary: 'No such device',
        params: { id: 'ffffff', credential_id: CREDENTIAL_ID },
        status: 404,
        response: err('noSuchDevice', 'ffffff'),
      },
    ],
    async handler(req, { credentials }) {
      const removed = await credentials.remove(req.tenant, req.params.id!, req.params.credential_id!, req.requestId);
      return { status: 200, body: { result: 'ok', removed_credential: removed } };
    },
  },
];
