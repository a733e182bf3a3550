// POST /auth (token for credentials) and POST /auth/user (admins create users).
import type pg from 'pg';
import { errors } from '../errors.js';
import type { Route } from '../http/types.js';
import { validate } from '../schemas/validator.js';
import { registryTime } from '../time.js';
import { verifyPassword } from './passwords.js';
import type { Tokens } from './tokens.js';
import { createUser, findUser } from './users.js';

interface Deps {
  pool: pg.Pool;
  tokens: Tokens;
}

export function authRoutes({ pool, tokens }: Deps): Route[] {
  return [
    {
      method: 'POST',
      path: '/auth',
      auth: false,
      body: 'json',
      badBody: errors.authInvalidMimetype,
      async handler(req) {
        // Not an object: `invalid mimetype`; then `missing username`, `missing password` (schema auth.login).
        const body = validate<{ username: string; passwd: string }>('auth.login', req.body);
        const user = await findUser(pool, body.username);
        if (!user) throw errors.authUnknownUser();
        if (!(await verifyPassword(body.passwd, user.passwordHash))) throw errors.authWrongPassword();
        return { status: 200, body: { jwt: await tokens.issue(user) } };
      },
    },
    {
      method: 'POST',
      path: '/auth/user',
      // Deferred: the profile is checked first, so a non-admin gets 403 whatever the body.
      body: 'json-deferred',
      async handler(req) {
        if (req.claims?.profile !== 'admin') throw errors.forbidden();
        if (req.bodyError) throw req.bodyError;
        const input = validate<{ username: string; passwd: string; service: string; profile: string }>('auth.createUser', req.body);
        const user = await createUser(pool, { username: input.username, password: input.passwd, tenant: input.service, profile: input.profile });
        if (!user) throw errors.userExists(input.username);
        return {
          status: 201,
          body: { id: user.id, username: user.username, service: user.tenant, profile: user.profile, created: registryTime(user.created) },
        };
      },
    },
  ];
}
