// A value PostgreSQL's numeric cannot hold (a bulk-loaded `1e200000`, or 20,000 digits after the point: docs/operations.md §6,
// "Loading history in bulk", the value column read as it is): it is no number for the numeric
// aggregates, and the rollup pass goes on for every series. Before (found by an audit), reading
// it as numeric raised "value overflows numeric format": every rollup pass failed at its hour
// from then on, so no hour of any series was rolled up or computed again after a late row.
import { beforeAll, describe, expect, it } from 'vitest';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';
import { getHistory } from './fixtures.js';

const svc = useService();
let tenant: string;
let token: string;
let bad: string;
let good: string;

type Bucket = { ts: string } & Record<string, unknown>;
const Q = '?attr=temperature&interval=1h&agg=avg,max,count&dateFrom=2024-06-01T00:00:00Z&dateTo=2024-06-01T00:59:59.999999Z';
const rolledHours = async (device: string) =>
  (
    await svc.service.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM history_rollup WHERE tenant = $1 AND device_id = $2', [
      tenant,
      device,
    ])
  ).rows[0]!.n;

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('rollupbad'));
  const pool = svc.service.pool;
  const t = await createTemplate(pool, tenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  bad = await createDevice(pool, tenant, [t]);
  good = await createDevice(pool, tenant, [t]);
  await svc.service.historyMaintenance.rollUp();
  await insertHistory(pool, [
    { tenant, device: bad, attr: 'temperature', ts: '2024-06-01T00:10:00Z', value: '1e200000' },
    { tenant, device: bad, attr: 'temperature', ts: '2024-06-01T00:20:00Z', value: '2' },
    // More than numeric's 16,383 digits after the point.
    { tenant, device: bad, attr: 'temperature', ts: '2024-06-01T00:40:00Z', value: `0.${'1'.repeat(20_000)}` },
    { tenant, device: good, attr: 'temperature', ts: '2024-06-01T00:30:00Z', value: '5' },
  ]);
});

describe('a stored number beyond numeric', () => {
  const expectedBad = [{ ts: '2024-06-01T00:00:00.000000Z', avg: 2, max: 2, count: 3 }];
  const expectedGood = [{ ts: '2024-06-01T00:00:00.000000Z', avg: 5, max: 5, count: 1 }];

  it('is no number for avg/min/max/sum, from the rows', async () => {
    const r = await getHistory<Bucket[]>(svc.base, token, bad, Q);
    expect(r.status, r.text).toBe(200);
    expect(r.body).toEqual(expectedBad);
  });

  it('does not stop the rollup pass: its hour and the other series are rolled up, the answers unchanged', async () => {
    await svc.service.historyMaintenance.rollUp();
    expect(await rolledHours(good)).toBe(1);
    expect(await rolledHours(bad)).toBe(1);
    expect((await getHistory<Bucket[]>(svc.base, token, good, Q)).body).toEqual(expectedGood);
    expect((await getHistory<Bucket[]>(svc.base, token, bad, Q)).body).toEqual(expectedBad);
  });

  it('nor a rollup from scratch (history_rollup_rebuild, then a pass)', async () => {
    const pool = svc.service.pool;
    await pool.query('SELECT history_rollup_rebuild()');
    await svc.service.historyMaintenance.rollUp();
    const { rows } = await pool.query<{ caught_up: boolean }>(
      `SELECT rolled_before = date_bin(interval '1 hour', now() - interval '5 minutes', timestamptz 'epoch') AS caught_up FROM history_settings`,
    );
    expect(rows[0]!.caught_up).toBe(true);
    expect(await rolledHours(good)).toBe(1);
    expect((await getHistory<Bucket[]>(svc.base, token, bad, Q)).body).toEqual(expectedBad);
  });
});
