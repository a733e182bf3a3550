// GET /history/device/{id}/history for another tenant's device (decisions.md "History",
// docs/messaging.md §6): 404 No such device on every response path (one attr, several, none,
// with operators), its value never in the answer, both ways round; its own tenant sees it. Rows
// are written directly with known times.
import { beforeAll, describe, expect, it } from 'vitest';
import type { HistoryRecord } from '../helpers/api.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';
import { getHistory, sensorWithTemperatures, ts } from './fixtures.js';

const svc = useService({ HISTORY_MAX_RESULTS: '50' });
let tenant: string;
let token: string;
let otherTenant: string;
let otherToken: string;
let device: string;
let foreign: string;

const ms = (minute: number) => Date.parse(ts(minute));

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('hie'));
  ({ tenant: otherTenant, token: otherToken } = await svc.freshTenant('hio'));
  const pool = svc.service.pool;
  const sensor = await sensorWithTemperatures(pool, tenant);
  device = sensor.device;
  // A device that exists only in the other tenant, with data.
  const to = await createTemplate(pool, otherTenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  foreign = await createDevice(pool, otherTenant, [to]);

  const rows = sensor.rows;
  rows.push({ tenant: otherTenant, device: foreign, attr: 'temperature', ts: ts(1), value: '4242.125' });
  await insertHistory(pool, rows);
});

/** The history of `id` (the device by default) as `as` sees it. */
const get = <T = HistoryRecord[]>(query: string, as = token, id = device) => getHistory<T>(svc.base, as, id, query);

describe("another tenant's device", () => {
  it('404 No such device on every response path (one attr, several, none), whatever the operators', async () => {
    const notFound = { message: `No such device: ${foreign}`, status: 404 };
    for (const query of [
      '?attr=temperature',
      '?attr=temperature&lastN=1',
      '?attr=temperature,mode',
      '?attr=temperature&attr=temperature',
      '',
      `?firstN=5&dateFrom=${ms(0)}`,
    ]) {
      const res = await get(query, token, foreign);
      expect(res.status, query).toBe(404);
      expect(res.body, query).toEqual(notFound);
      // (the value, not the id: a hexadecimal id may hold any digits)
      expect(res.text, query).not.toContain('4242');
    }
    // its own tenant sees it
    expect((await get('?attr=temperature', otherToken, foreign)).body).toEqual([
      { device_id: foreign, ts: ts(1), value: 4242.125, attr: 'temperature' },
    ]);
  });

  it("and the other way round: the other tenant gets 404 for this tenant's device", async () => {
    for (const query of ['?attr=temperature', '?attr=temperature,mode', '']) {
      const res = await get(query, otherToken, device);
      expect(res.status, query).toBe(404);
      expect(res.body, query).toEqual({ message: `No such device: ${device}`, status: 404 });
    }
  });
});
