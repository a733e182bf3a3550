// Aggregates from hourly rollups on a database whose DateStyle is not ISO and whose TimeZone
// writes an abbreviation that PostgreSQL reads back as another offset (`ALTER DATABASE ... SET
// datestyle = 'SQL, DMY'`, `timezone = 'Asia/Kolkata'`: a time is written `01/06/2024 15:30:00
// IST`, and `IST` is read as Israel's +02). Before, found by an audit, the read passed the
// rolled hours' bounds through that text, 3.5 hours off: buckets after `dateTo` were answered and
// others counted twice or half. The answer must be the rows' answer, as on any database
// (docs/messaging.md §6, "Hourly rollups").
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { createDevice, createTemplate, deviceClient, eventually, insertHistory } from '../helpers/registry-fixtures.js';
import { freshDatabase, freshTenant, login, startTestService, type TestService } from '../helpers/service.js';
import { getHistory } from './fixtures.js';

let svc: TestService;
let token: string;
let device: string;
let tenant: string;

type Bucket = { ts: string; count: number; sum: number };
const at = (iso: string) => iso.replace('Z', '.000000Z');

// 2024-06-01 10:00 to 13:50 UTC, one value every 10 minutes: i = 0..23, value i.
const values = Array.from({ length: 24 }, (_, i) => ({
  ts: new Date(Date.parse('2024-06-01T10:00:00Z') + i * 600_000).toISOString(),
  v: i,
}));

/** The hourly buckets (UTC) of the rows themselves within [from, to]. */
function expected(from: string, to: string): Bucket[] {
  const inRange = values.filter((x) => Date.parse(x.ts) >= Date.parse(from) && Date.parse(x.ts) <= Date.parse(to));
  const byHour = new Map<string, number[]>();
  for (const x of inRange) {
    const hour = x.ts.slice(0, 13) + ':00:00.000Z';
    byHour.set(hour, [...(byHour.get(hour) ?? []), x.v]);
  }
  return [...byHour].map(([hour, vs]) => ({ ts: at(hour.replace('.000Z', 'Z')), count: vs.length, sum: vs.reduce((a, b) => a + b, 0) }));
}

beforeAll(async () => {
  const url = await freshDatabase();
  const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await admin.connect();
  const name = new URL(url).pathname.slice(1);
  await admin.query(`ALTER DATABASE "${name}" SET datestyle = 'SQL, DMY'`);
  await admin.query(`ALTER DATABASE "${name}" SET timezone = 'Asia/Kolkata'`);
  await admin.end();
  // The database's own settings (a connection that sets nothing sees them).
  const plain = new pg.Client({ connectionString: url });
  await plain.connect();
  const { rows } = await plain.query<{ ds: string; tz: string }>(
    `SELECT current_setting('datestyle') AS ds, current_setting('timezone') AS tz`,
  );
  await plain.end();
  expect(rows[0]).toEqual({ ds: 'SQL, DMY', tz: 'Asia/Kolkata' });
  svc = await startTestService({ DATABASE_URL: url });
  const pool = svc.service.pool;
  const user = await freshTenant(svc.base, await login(svc.base), 'rds');
  token = user.token;
  tenant = user.tenant;
  const t = await createTemplate(pool, user.tenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  device = await createDevice(pool, user.tenant, [t]);
  await svc.service.historyMaintenance.rollUp();
  await insertHistory(
    pool,
    values.map((x) => ({ tenant: user.tenant, device, attr: 'temperature', ts: x.ts, value: String(x.v) })),
  );
  // The late rows' hours computed: reads take them from the rollups.
  await svc.service.historyMaintenance.rollUp();
  expect((await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM history_rollup_dirty')).rows[0]!.n).toBe(0);
  expect((await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM history_rollup')).rows[0]!.n).toBe(4);
}, 60_000);

afterAll(() => svc?.stop());

describe('DateStyle SQL, TimeZone Asia/Kolkata', () => {
  it.each([
    ['2024-06-01T10:30:00Z', '2024-06-01T12:15:00Z'],
    ['2024-06-01T10:00:00Z', '2024-06-01T13:59:59Z'],
    ['2024-06-01T09:00:00Z', '2024-06-01T11:00:00Z'],
  ])('hourly count and sum of %s..%s: the rows’ answer, from the rollups where whole hours are', async (from, to) => {
    const r = await getHistory<Bucket[]>(
      svc.base,
      token,
      device,
      `?attr=temperature&interval=1h&agg=sum,count&dateFrom=${from}&dateTo=${to}`,
    );
    expect(r.status).toBe(200);
    expect(r.body).toEqual(expected(from, to));
  });

  it('one local day (Europe/Berlin): every row once', async () => {
    const r = await getHistory<Bucket[]>(svc.base, token, device, '?attr=temperature&interval=1d&tz=Europe/Berlin&agg=sum,count');
    expect(r.body).toEqual([{ ts: '2024-05-31T22:00:00.000000Z', sum: 276, count: 24 }]);
  });

  it('a value published over MQTT at 01:00 UTC of a day without a partition is stored (its partition covers the UTC day)', async () => {
    const client = await deviceClient(svc.env.MQTT_URL!, { username: `${tenant}:${device}` });
    await client.publishAsync(`${tenant}:${device}/attrs`, JSON.stringify({ temperature: 7, timestamp: '2024-08-01T01:00:00Z' }), {
      qos: 1,
    });
    await client.endAsync();
    const got = await eventually(async () => {
      const r = await getHistory<Array<{ ts: string; value: number }>>(svc.base, token, device, '?attr=temperature&dateFrom=2024-08-01');
      return r.body.length > 0 ? r.body : undefined;
    }, 'the value stored');
    expect(got).toEqual([{ device_id: device, attr: 'temperature', ts: '2024-08-01T01:00:00.000000Z', value: 7 }]);
  });
});
