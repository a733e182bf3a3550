// Hourly rollups and retention with a chunk interval that does not end on whole hours
// (HISTORY_CHUNK_INTERVAL=45 minutes, 90 minutes, ...): dropping an expired partition that ends
// inside an hour leaves rows of that hour in the next partition, and the aggregates of that hour
// must still be the rows' answer, also once a late row of an expired day makes an older
// partition again (plain PostgreSQL: reads take rollups from the oldest partition's start on).
import crypto from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { forgetHorizon } from '../../src/history/horizon.js';
import type { HistoryRecord } from '../helpers/api.js';
import { timescaleLayout } from '../helpers/history-layout.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { login, startTestService, tenantToken, type TestService } from '../helpers/service.js';
import { getHistory } from './fixtures.js';

const TIMESCALE = await timescaleLayout();
const HOUR = 3_600_000;
const DAY = 86_400_000;

let svc: TestService | undefined;
afterAll(() => svc?.stop());

/**
 * A chunk interval (minutes) and the end E of the newest expired partition under a retention
 * of one day, such that E is not a whole hour and the partition after it stays unexpired for
 * at least 10 more minutes (the test runs well within that).
 */
function chunkPlan(now: number): { minutes: number; end: number } {
  for (const minutes of [45, 90, 50, 70, 75, 100, 105, 110]) {
    const ms = minutes * 60_000;
    const end = Math.floor((now - DAY) / ms) * ms;
    if (end % HOUR !== 0 && end + ms - (now - DAY) > 10 * 60_000) return { minutes, end };
  }
  throw new Error('no chunk interval fits now');
}

// Plain partitions only: the service's maintenance pass drops them. On TimescaleDB the chunks are
// dropped by TimescaleDB's retention policy job (test/history/retention.test.ts covers that layout).
if (TIMESCALE)
  process.stdout.write(
    '[rollup-chunk-edges.test.ts] plain-PostgreSQL check NOT RUN: this PostgreSQL has TimescaleDB (the layout of retention.test.ts)\n',
  );

describe(`retention with chunks that end inside an hour (plain PostgreSQL${TIMESCALE ? ' only: NOT RUN on TimescaleDB' : ''})`, () => {
  it.skipIf(TIMESCALE)(
    'an hour split by a dropped partition answers the rows left of it, before and after a late row makes an older partition again',
    async () => {
      const { minutes, end } = chunkPlan(Date.now());
      svc = await startTestService({ HISTORY_CHUNK_INTERVAL: `${minutes} minutes`, HISTORY_RETENTION_DAYS: '1' });
      const pool = svc.service.pool;
      const tenant = `edge${crypto.randomBytes(3).toString('hex')}`;
      const token = await tenantToken(svc.base, await login(svc.base), tenant);
      const t = await createTemplate(pool, tenant, 't', [{ label: 'v', type: 'dynamic', value_type: 'integer' }]);
      const id = await createDevice(pool, tenant, [t]);
      const hour = Math.floor(end / HOUR) * HOUR; // the hour the expired partition's end splits
      const iso = (ms: number) => new Date(ms).toISOString();
      // One row on each side of the partition end, in the same hour; one more an hour later.
      await insertHistory(pool, [
        { tenant, device: id, attr: 'v', ts: iso(end - 60_000), value: '1' },
        { tenant, device: id, attr: 'v', ts: iso(end + 60_000), value: '2' },
        { tenant, device: id, attr: 'v', ts: iso(hour + HOUR + 60_000), value: '4' },
      ]);
      await svc.service.historyMaintenance.rollUp();
      const range = `dateFrom=${iso(hour - 3 * HOUR)}&dateTo=${iso(hour + 2 * HOUR - 1000)}`;
      const buckets = async () => {
        forgetHorizon(pool); // the horizon as it is now (reads see it within 5 s anyway)
        const r = await getHistory<Array<{ ts: string; count: number; sum: number }>>(
          svc!.base,
          token,
          id,
          `?attr=v&interval=1h&agg=sum,count&${range}`,
        );
        expect(r.status, r.text).toBe(200);
        return r.body;
      };
      const rows = async () => {
        const r = await getHistory<HistoryRecord[]>(svc!.base, token, id, `?attr=v&${range}`);
        return r.body.map((x) => x.value).sort();
      };
      const at = (ms: number) => iso(ms).replace('Z', '000Z');
      expect(await buckets()).toEqual([
        { ts: at(hour), sum: 3, count: 2 },
        { ts: at(hour + HOUR), sum: 4, count: 1 },
      ]);
      // Retention drops the partition ending at `end` (and the older ones): value 1 goes.
      await svc.service.historyMaintenance.runOnce();
      await svc.service.historyMaintenance.rollUp();
      expect(await rows()).toEqual([2, 4]);
      const afterDrop = [
        { ts: at(hour), sum: 2, count: 1 },
        { ts: at(hour + HOUR), sum: 4, count: 1 },
      ];
      expect(await buckets()).toEqual(afterDrop);
      // A late row of an expired hour two hours earlier (a device's backlog) makes an older
      // partition again until the next maintenance pass: the split hour still answers its row.
      await insertHistory(pool, [{ tenant, device: id, attr: 'v', ts: iso(hour - 2 * HOUR + 60_000), value: '8' }]);
      expect(await rows()).toEqual([2, 4, 8]);
      expect(await buckets()).toEqual([{ ts: at(hour - 2 * HOUR), sum: 8, count: 1 }, ...afterDrop]);
      await svc.service.historyMaintenance.rollUp();
      expect(await buckets()).toEqual([{ ts: at(hour - 2 * HOUR), sum: 8, count: 1 }, ...afterDrop]);
    },
    120_000,
  );
});
