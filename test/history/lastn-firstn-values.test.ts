// GET /history/device/{id}/history, the values of lastN and firstN (decisions.md "History",
// docs/messaging.md §6, docs/api.md "How requests are validated"): a repeated lastN (the first
// value counts, the later one is not read), and lastN or firstN beyond 2^53 − 1 (400 naming the
// parameter, never 500). Rows are written directly with known times.
import { beforeAll, describe, expect, it } from 'vitest';
import type { ErrorBody, HistoryRecord } from '../helpers/api.js';
import { insertHistory } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';
import { getHistory, sensorWithTemperatures, valuesOf } from './fixtures.js';

const svc = useService({ HISTORY_MAX_RESULTS: '50' });
let tenant: string;
let token: string;
let device: string;

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('hie'));
  const pool = svc.service.pool;
  const sensor = await sensorWithTemperatures(pool, tenant);
  device = sensor.device;

  const rows = sensor.rows;
  await insertHistory(pool, rows);
});

/** The history of `id` (the device by default) as `as` sees it. */
const get = <T = HistoryRecord[]>(query: string, as = token, id = device) => getHistory<T>(svc.base, as, id, query);

describe('lastN', () => {
  it('repeated: the first value counts', async () => {
    expect(valuesOf((await get('?attr=temperature&lastN=2&lastN=5')).body)).toEqual([29, 28]);
    expect(valuesOf((await get('?attr=temperature&lastN=5&lastN=2')).body)).toEqual([29, 28, 27, 26, 25]);
    // the later value is not read at all, not even checked
    const later = await get('?attr=temperature&lastN=1&lastN=abc');
    expect(later.status).toBe(200);
    expect(valuesOf(later.body)).toEqual([29]);
    const first = await get('?attr=temperature&lastN=abc&lastN=1');
    expect(first.status).toBe(400);
    expect(first.body).toEqual({ message: 'lastN must be a non-negative integer, got "abc"', status: 400 });
  });

  it.each(['9007199254740992', '9007199254740993', '18446744073709551616', '1' + '0'.repeat(400)])(
    'beyond 2^53 − 1 (%s): 400 naming lastN, never 500',
    async (n) => {
      for (const id of [device, 'ffffff']) {
        const res = await get<ErrorBody>(`?attr=temperature&lastN=${n}`, token, id);
        expect(res.status).toBe(400);
        expect(res.body.status).toBe(400);
        expect(res.body.message).toMatch(/^lastN must be /);
        expect(res.body.message).toContain(n.length > 40 ? n.slice(0, 20) : n);
      }
    },
  );

  it('firstN beyond 2^53 − 1 names firstN', async () => {
    const res = await get<ErrorBody>('?attr=temperature&firstN=9007199254740993&lastN=1');
    expect(res.status).toBe(400);
    expect(res.body.message).toMatch(/^firstN must be /);
  });
});
