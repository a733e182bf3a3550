// POST /history/latest and `lastValues` on a database created with a locale (ICU en-US, as an
// external PostgreSQL often is): the answer is "ordered by device id then label" in byte order,
// the order the embedded database (locale C) gives, whatever the database's collation
// (docs/messaging.md §6, "Latest values of many devices"). Before, found by an audit, the ids and
// labels were ordered in the database's collation: on en-US, `aa02` before `AB01` and `alpha`
// before `Zeta`, where the embedded database answers `AB01` and `Zeta` first.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { freshTenant, http, login, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService | undefined;
let token: string;
let template: number;
/** Why the check cannot run here (the server has no ICU collations), else undefined. */
let notRun: string | undefined;

/** A database of the run's server created with the ICU en-US locale, or the reason there is none. */
async function localeDatabase(): Promise<string | { reason: string }> {
  const admin = inject('adminDatabaseUrl');
  const name = `dr_test_${inject('runId')}_${process.pid}_icu_${crypto.randomBytes(3).toString('hex')}`;
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${name}" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'`);
  } catch (err) {
    return { reason: (err as Error).message };
  } finally {
    await client.end();
  }
  const url = new URL(admin);
  url.pathname = '/' + name;
  return url.toString();
}

beforeAll(async () => {
  const db = await localeDatabase();
  if (typeof db !== 'string') {
    notRun = db.reason;
    process.stdout.write(`[latest-collation.test.ts] NOT RUN: no ICU en-US database on this server (${notRun})\n`);
    return;
  }
  svc = await startTestService({ DATABASE_URL: db });
  const user = await freshTenant(svc.base, await login(svc.base), 'lcol');
  token = user.token;
  const pool = svc.service.pool;
  // The database's own order differs from byte order for both ids and labels.
  const { rows } = await pool.query<{ ids: boolean; labels: boolean }>(`SELECT 'aa02' < 'AB01' AS ids, 'alpha' < 'Zeta' AS labels`);
  expect(rows[0]).toEqual({ ids: true, labels: true });
  template = await createTemplate(pool, user.tenant, 'mixed', [
    { label: 'Zeta', type: 'dynamic', value_type: 'float' },
    { label: 'alpha', type: 'dynamic', value_type: 'float' },
  ]);
  for (const id of ['aa02', 'AB01']) await createDevice(pool, user.tenant, [template], { id });
  const ts = new Date(Date.now() - 1_000).toISOString();
  await insertHistory(
    pool,
    ['aa02', 'AB01'].flatMap((device) => ['Zeta', 'alpha'].map((attr) => ({ tenant: user.tenant, device, attr, ts, value: '1' }))),
  );
}, 60_000);

afterAll(() => svc?.stop());

const BYTE_ORDER = ['AB01/Zeta', 'AB01/alpha', 'aa02/Zeta', 'aa02/alpha'];

describe('on a database with the en-US collation', () => {
  it('POST /history/latest: ordered by device id then label in byte order, by ids and by template', async (ctx) => {
    if (notRun) return ctx.skip();
    for (const body of [{ devices: ['aa02', 'AB01'] }, { template }]) {
      const r = await http<Array<{ device_id: string; attr: string }>>('POST', `${svc!.base}/history/latest`, { token, body });
      expect(r.status).toBe(200);
      expect(r.body.map((e) => `${e.device_id}/${e.attr}`)).toEqual(BYTE_ORDER);
    }
  });

  it('GET /device/{id}?lastValues=true: last_values in byte order of the labels', async (ctx) => {
    if (notRun) return ctx.skip();
    const r = await http<{ last_values: Record<string, unknown> }>('GET', `${svc!.base}/device/AB01?lastValues=true`, { token });
    expect(r.status).toBe(200);
    expect(Object.keys(r.body.last_values)).toEqual(['Zeta', 'alpha']);
  });
});
