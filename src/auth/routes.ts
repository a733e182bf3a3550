// POST /auth (token for credentials) and POST /auth/user (admins create users).
import type pg from 'pg';
import { errors } from '../errors.js';
import type { RouteSpec } from '../http/types.js';
import { BODY_ERRORS, TIME, err } from '../openapi/examples.js';
import { noNul } from '../schemas/templates.js';
import { bodySchema, validate } from '../schemas/validator.js';
import { verifyPassword } from './passwords.js';
import type { Tokens } from './tokens.js';
import { PLATFORM_TENANT, createUser, findUser } from './users.js';

/** decisions.md "Authentication": not a JSON object -> `invalid mimetype`, then each field. */
const loginBody = bodySchema({
  $id: 'auth.login',
  type: 'object',
  required: ['username', 'passwd'],
  properties: {
    username: { type: 'string', minLength: 1, 'x-error': 'authMissingUsername' },
    passwd: { type: 'string', minLength: 1, 'x-error': 'authMissingPassword' },
  },
  'x-error': { type: 'authInvalidMimetype' },
  'x-error-order': ['authInvalidMimetype', 'authMissingUsername', 'authMissingPassword'],
});

const createUserBody = bodySchema({
  $id: 'auth.createUser',
  type: 'object',
  required: ['username', 'passwd', 'service', 'profile'],
  properties: {
    // Length and pattern apart, so that each failure gets its own text.
    username: {
      type: 'string',
      minLength: 1,
      maxLength: 128,
      allOf: [{ pattern: '^[A-Za-z0-9_.@-]*$', 'x-message': 'Usernames may contain letters, numbers and .@_-' }],
    },
    passwd: { type: 'string', minLength: 1, maxLength: 1024, allOf: [noNul] },
    service: {
      type: 'string',
      minLength: 1,
      maxLength: 128,
      allOf: [{ pattern: '^[A-Za-z0-9_-]*$', 'x-message': 'Tenants may contain letters, numbers or dashes(-_)' }],
      description: 'The tenant.',
    },
    profile: {
      type: 'string',
      minLength: 1,
      maxLength: 64,
      allOf: [noNul],
      description: '`admin` may create users; any other text is an ordinary user.',
    },
  },
});

export const authRoutes: RouteSpec<{ pool: pg.Pool; tokens: Tokens }>[] = [
  {
    method: 'POST',
    path: '/auth',
    auth: false,
    summary: 'Get a token',
    description: 'The token goes into `Authorization: Bearer <jwt>` of every other request. Its lifetime is TOKEN_TTL_SECONDS.',
    tag: 'auth',
    body: {
      read: 'json',
      notJson: errors.authInvalidMimetype,
      schema: loginBody,
      description: 'Not a JSON object: 400 `invalid mimetype`; then `missing username`, `missing password`.',
    },
    responses: {
      200: { description: 'A token.', schema: 'Token' },
      400: {
        description: 'Not a JSON object, or a field is missing.',
        errors: ['authInvalidMimetype', 'authMissingUsername', 'authMissingPassword'],
      },
      401: { description: 'Unknown user.', errors: ['authUnknownUser'] },
      403: { description: 'Wrong password.', errors: ['authWrongPassword'] },
      503: { description: 'The database is unavailable; retry later.', errors: ['unhealthy'] },
    },
    examples: [
      {
        name: 'token',
        summary: 'Credentials of the first admin',
        body: { username: 'admin', passwd: 'admin' },
        status: 200,
        response: { jwt: 'eyJhbGciOiJIUzI1NiJ9.eyJzZXJ2aWNlIjoiYWRtaW4ifQ.c2lnbmF0dXJl' },
      },
      { name: 'noPassword', summary: 'passwd missing', body: { username: 'admin' }, status: 400, response: err('authMissingPassword') },
      {
        name: 'unknownUser',
        summary: 'No such user',
        body: { username: 'nobody', passwd: 'secret' },
        status: 401,
        response: err('authUnknownUser'),
      },
      {
        name: 'wrongPassword',
        summary: 'Wrong password',
        body: { username: 'admin', passwd: 'wrong' },
        status: 403,
        response: err('authWrongPassword'),
      },
    ],
    async handler(req, { pool, tokens }) {
      // Not an object: `invalid mimetype`; then `missing username`, `missing password`.
      const body = validate<{ username: string; passwd: string }>(loginBody, req.body);
      const user = await findUser(pool, body.username);
      if (!user) throw errors.authUnknownUser();
      if (!(await verifyPassword(body.passwd, user.passwordHash))) throw errors.authWrongPassword();
      return { status: 200, body: { jwt: await tokens.issue(user) } };
    },
  },
  {
    method: 'POST',
    path: '/auth/user',
    summary: 'Create a user (admin profile only)',
    description:
      'The user belongs to the tenant `service`; every registry entry is scoped to the tenant of the token. ' +
      "An admin of tenant `admin` (the first admin's) creates users of any tenant; an admin of another tenant, of its own tenant only (403 otherwise).",
    tag: 'auth',
    // Deferred: the profile is checked first, so a non-admin gets 403 whatever the body.
    body: { read: 'json-deferred', schema: createUserBody },
    responses: {
      201: { description: 'The user (never a password field).', schema: 'User' },
      400: { description: 'Invalid body.', errors: BODY_ERRORS },
      403: {
        description: 'The caller is not an admin, or an admin of another tenant than `service` and not of tenant `admin`.',
        errors: ['forbidden', 'forbiddenOtherTenant'],
      },
      409: { description: 'The username is taken.', errors: ['userExists'] },
    },
    examples: [
      {
        name: 'created',
        summary: 'A user in tenant acme',
        body: { username: 'alice', passwd: 's3cret', service: 'acme', profile: 'user' },
        status: 201,
        response: { id: 2, username: 'alice', service: 'acme', profile: 'user', created: TIME },
      },
      {
        name: 'taken',
        summary: 'Username taken',
        body: { username: 'admin', passwd: 's3cret', service: 'acme', profile: 'user' },
        status: 409,
        response: err('userExists', 'admin'),
      },
      {
        name: 'invalid',
        summary: 'Fields missing',
        body: { username: 'bob' },
        status: 400,
        response: err('validation', {
          passwd: ['Missing data for required field.'],
          service: ['Missing data for required field.'],
          profile: ['Missing data for required field.'],
        }),
      },
    ],
    async handler(req, { pool }) {
      if (req.claims?.profile !== 'admin') throw errors.forbidden();
      if (req.bodyError) throw req.bodyError;
      const input = validate<{ username: string; passwd: string; service: string; profile: string }>(createUserBody, req.body);
      // Tenant isolation: a tenant's admin cannot make itself a user (or admin) of another tenant.
      const own = req.claims.service;
      if (own !== PLATFORM_TENANT && input.service !== own) throw errors.forbiddenOtherTenant(own);
      const user = await createUser(pool, {
        username: input.username,
        password: input.passwd,
        tenant: input.service,
        profile: input.profile,
      });
      if (!user) throw errors.userExists(input.username);
      return {
        status: 201,
        body: { id: user.id, username: user.username, service: user.tenant, profile: user.profile, created: user.created },
      };
    },
  },
];
