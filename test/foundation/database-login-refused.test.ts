// The database refusing the service's login (its password changed before DATABASE_URL was, as in
// docs/operations.md §5's rotation of POSTGRES_PASSWORD; the role not permitted to log in) is the
// database being unavailable to the service: requests that need a new connection are answered
// 503 "Database unavailable" (retry later), as /health answers, not 500 "Internal Error" with a
// stack trace in the log as if the service had a bug.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import type { TemplateList } from '../helpers/api.js';
import { http, login, startTestService, testEnv, type TestService } from '../helpers/service.js';

const role = `dr_login_${crypto.randomBytes(4).toString('hex')}`;
let admin: pg.Client;
let svc: TestService;
let databaseUrl: string;

beforeAll(async () => {
  admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await admin.connect();
  await admin.query(`CREATE ROLE ${role} LOGIN SUPERUSER PASSWORD 'login-refused-test'`);
  const env = await testEnv();
  databaseUrl = env.DATABASE_URL!;
  const url = new URL(env.DATABASE_URL!);
  url.username = role;
  url.password = 'login-refused-test';
  // One connection, so that after the role's sessions end every request needs a new one.
  svc = await startTestService({ ...env, DATABASE_URL: url.toString(), PG_POOL_SIZE: '1' });
});

afterAll(async () => {
  await svc?.stop();
  // The role owns the test database's tables: give them to the admin, then drop the role.
  const owner = new pg.Client({ connectionString: databaseUrl });
  await owner.connect();
  await owner.query(`REASSIGN OWNED BY ${role} TO CURRENT_USER; DROP OWNED BY ${role}`);
  await owner.end();
  await admin.query(`DROP ROLE ${role}`);
  await admin.end();
});

it('a login the database refuses: 503 Database unavailable, and 200 again once it accepts it', async () => {
  const token = await login(svc.base);
  expect((await http<TemplateList>('GET', `${svc.base}/template`, { token })).status).toBe(200);

  await admin.query(`ALTER ROLE ${role} NOLOGIN`);
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1', [role]);
  const template = { label: 'refused', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] };
  for (const [path, body] of [
    ['/template', template],
    ['/auth', { username: 'admin', passwd: 'admin' }],
  ] as const) {
    const res = await http('POST', `${svc.base}${path}`, { token, body });
    expect({ path, status: res.status, body: res.body }).toEqual({
      path,
      status: 503,
      body: { message: 'Database unavailable', status: 503 },
    });
  }
  expect((await http('GET', `${svc.base}/health`)).status).toBe(503);

  await admin.query(`ALTER ROLE ${role} LOGIN`);
  expect((await http('POST', `${svc.base}/template`, { token, body: template })).status).toBe(200);
});
