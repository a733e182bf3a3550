// Hourly rollups when HISTORY_RETENTION_DAYS is raised (or removed) at a restart. On TimescaleDB
// the retention policy's job drops chunks on its own schedule, and each rollup pass forgets the
// rollups of the hours before the policy's cut (sql/140_history_rollups_from_retention.sql),
// while reads take those hours from their rows, which may still be there (the job has not run
// yet, or a chunk only partly expired). A restart with a longer retention, or none, moves the cut
// back: the aggregates of those hours must still be the rows' answer. On plain PostgreSQL (and
// TimescaleDB's Apache-only build) the service drops partitions itself and forgets only the
// hours of what it dropped: the same checks hold there.
import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { forgetHorizon } from '../../src/history/horizon.js';
import type { HistoryRecord } from '../helpers/api.js';
import { timescaleLayout } from '../helpers/history-layout.js';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { freshDatabase, login, servicesPerTest, tenantToken, type TestService } from '../helpers/service.js';
import { getHistory } from './fixtures.js';

const TIMESCALE = await timescaleLayout();
const HOUR = 3_600_000;
const DAY = 86_400_000;

const { start, stop } = servicesPerTest();

describe(`rollups after HISTORY_RETENTION_DAYS is raised or removed (${TIMESCALE ? 'TimescaleDB' : 'plain PostgreSQL'})`, () => {
  it('hourly aggregates answer what the rows answer, with retention 3 days, then 10 days, then none', async () => {
    const db = await freshDatabase();
    const tenant = `rr${crypto.randomBytes(3).toString('hex')}`;
    const first = await start({ DATABASE_URL: db, HISTORY_RETENTION_DAYS: '3' });
    const pool = first.service.pool;
    // The retention policy's job has not dropped the expired chunk yet (it runs on TimescaleDB's
    // schedule): paused here, so the test decides when it does not run.
    if (TIMESCALE) {
      await pool.query(`SELECT alter_job(job_id, scheduled => false) FROM timescaledb_information.jobs
                         WHERE proc_name = 'policy_retention' AND hypertable_name = 'history'`);
    }
    await first.service.historyMaintenance.rollUp(); // the start's pass, done
    const t = await createTemplate(pool, tenant, 't', [{ label: 'v', type: 'dynamic', value_type: 'integer' }]);
    const id = await createDevice(pool, tenant, [t]);
    const now = Date.now();
    const base = Math.floor((now - 6 * DAY) / HOUR) * HOUR;
    const iso = (ms: number) => new Date(ms).toISOString();
    // Rows of 6 and 5 days ago (expired), around the retention's cut, and of a day ago.
    const at = [base + 10 * 60_000, base + 20 * 60_000, base + DAY + 5 * 60_000, now - 3 * DAY - 2 * HOUR, now - 3 * DAY - HOUR, now - DAY];
    await insertHistory(
      pool,
      at.map((ms, i) => ({ tenant, device: id, attr: 'v', ts: iso(ms), value: String(i + 1) })),
    );
    // Rolled up (the rows are late: their hours marked, then computed), then the rollups before
    // the retention's cut forgotten.
    await first.service.historyMaintenance.rollUp();

    const range = `dateFrom=${iso(base)}&dateTo=${iso(now)}`;
    const compare = async (s: TestService, what: string) => {
      forgetHorizon(s.service.pool); // the horizon as it is now (reads see it within 5 s anyway)
      const token = await tenantToken(s.base, await login(s.base), tenant);
      const raw = await getHistory<HistoryRecord[]>(s.base, token, id, `?attr=v&${range}`);
      expect(raw.status, raw.text).toBe(200);
      const expected = new Map<string, { ts: string; sum: number; count: number }>();
      for (const r of raw.body) {
        const h = iso(Math.floor(Date.parse(r.ts) / HOUR) * HOUR).replace('Z', '000Z');
        const b = expected.get(h) ?? { ts: h, sum: 0, count: 0 };
        b.sum += r.value as number;
        b.count += 1;
        expected.set(h, b);
      }
      const agg = await getHistory<Array<{ ts: string; sum: number; count: number }>>(
        s.base,
        token,
        id,
        `?attr=v&interval=1h&agg=sum,count&${range}`,
      );
      expect(agg.status, agg.text).toBe(200);
      expect(agg.body, what).toEqual([...expected.values()].sort((a, b) => a.ts.localeCompare(b.ts)));
      return raw.body.length;
    };
    // Every row is still there (nothing dropped: the job waits, plain retention ran at start).
    expect(await compare(first, 'retention 3 days')).toBe(6);
    await stop(first);

    const second = await start({ DATABASE_URL: db, HISTORY_RETENTION_DAYS: '10' });
    expect(await compare(second, 'retention raised to 10 days, before a rollup pass')).toBe(6);
    await second.service.historyMaintenance.rollUp();
    expect(await compare(second, 'retention raised to 10 days, after a rollup pass')).toBe(6);
    await stop(second);

    // Once more from retention 3 days, then none.
    const third = await start({ DATABASE_URL: db, HISTORY_RETENTION_DAYS: '3' });
    if (TIMESCALE) {
      await third.service.pool.query(`SELECT alter_job(job_id, scheduled => false) FROM timescaledb_information.jobs
                                       WHERE proc_name = 'policy_retention' AND hypertable_name = 'history'`);
    }
    await third.service.historyMaintenance.rollUp();
    const kept = await compare(third, 'retention 3 days again');
    await stop(third);

    const fourth = await start({ DATABASE_URL: db });
    expect(await compare(fourth, 'retention removed, before a rollup pass')).toBe(kept);
    await fourth.service.historyMaintenance.rollUp();
    expect(await compare(fourth, 'retention removed, after a rollup pass')).toBe(kept);
  }, 120_000);
});
