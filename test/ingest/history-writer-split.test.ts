// Point 8 of issue 19: a batch the database refuses for a lasting reason (here a constraint the
// test adds) is split down to the rows that fail; those are dropped, counted and logged with
// their tenant, device and attribute, and the rest commits. A split interrupted by an outage
// goes on where it stopped: no row is written twice.
import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { DatabaseRetry } from '../../src/ingest/db-retry.js';
import { HistoryWriter } from '../../src/ingest/history-writer.js';
import { useService } from '../helpers/service.js';

const BAD = new Set(['13', '42', '77']);

describe('the history writer with rows the database refuses', () => {
  const svc = useService({ MQTT_URL: undefined });
  let db: pg.Pool;
  const tenant = `sp${crypto.randomBytes(3).toString('hex')}`;
  const at = Date.UTC(2026, 0, 1) * 1000; // µs

  beforeAll(async () => {
    db = new pg.Pool({ connectionString: svc.env.DATABASE_URL, max: 4 });
    // A lasting refusal of three values (check_violation, 23514): what validation cannot foresee.
    await db.query(`ALTER TABLE history ADD CONSTRAINT test_no_bad CHECK (NOT (tenant = '${tenant}' AND value IN ('13', '42', '77')))`);
  });
  afterAll(async () => {
    await db?.query('ALTER TABLE history DROP CONSTRAINT IF EXISTS test_no_bad');
    await db?.end();
  });

  /** COPY rows of `device`, attribute `n`, values `from`..`to - 1`, one microsecond apart. */
  async function rows(device: string, from: number, to: number): Promise<{ lines: string[]; times: number[] }> {
    const series = (await db.query<{ s: string }>('SELECT history_series($1, $2, $3)::text AS s', [tenant, device, 'n'])).rows[0]!.s;
    const lines: string[] = [];
    const times: number[] = [];
    for (let v = from; v < to; v++) {
      const us = at + v;
      times.push(us);
      lines.push(
        `${tenant}\t${device}\tn\t${series}\t${new Date(us / 1000).toISOString().slice(0, -1)}${String(us % 1000).padStart(3, '0')}Z\t${v}\n`,
      );
    }
    return { lines, times };
  }

  async function stored(device: string): Promise<Map<string, number>> {
    const { rows: r } = await db.query<{ value: string; n: number }>(
      'SELECT value, count(*)::int AS n FROM history WHERE tenant = $1 AND device_id = $2 GROUP BY value',
      [tenant, device],
    );
    return new Map(r.map((x) => [x.value, x.n]));
  }

  it('drops only the refused rows, logs each with its tenant, device and attribute, and commits the rest', async () => {
    const logged: string[] = [];
    const log = createLogger('info', {}, { write: (l) => logged.push(l) });
    const writer = new HistoryWriter(db, log, new DatabaseRetry(log));
    const { lines, times } = await rows('dev1', 0, 100);
    const outcome = await writer.write(lines, times);
    expect(outcome.rejected).toBe(3);
    const values = await stored('dev1');
    expect(values.size).toBe(97);
    expect([...values.values()].every((n) => n === 1)).toBe(true);
    for (const bad of BAD) expect(values.has(bad)).toBe(false);
    const errors = logged.map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.level === 'error');
    expect(errors).toHaveLength(3);
    for (const e of errors) {
      expect(e).toMatchObject({ msg: 'the database rejected a history row; dropped', tenant, device: 'dev1', attr: 'n', code: '23514' });
    }
  });

  it('goes on where it stopped after an outage in the middle of a split: no row written twice', async () => {
    const log = createLogger('silent');
    // The real database, with one connection attempt failing as in an outage: the third, i.e.
    // after the batch was refused and its first half committed.
    let connects = 0;
    // The two pg.Pool methods HistoryWriter calls (connect, query), hence the cast.
    const flaky = {
      connect: () => (++connects === 3 ? Promise.reject(new Error('connect ECONNREFUSED (test outage)')) : db.connect()),
      query: db.query.bind(db),
    } as unknown as pg.Pool;
    const writer = new HistoryWriter(flaky, log, new DatabaseRetry(log));
    const { lines, times } = await rows('dev2', 0, 16); // 13 refused: in the second half
    const outcome = await writer.write(lines, times);
    expect(connects).toBeGreaterThan(3);
    expect(outcome.rejected).toBe(1);
    const values = await stored('dev2');
    expect(values.size).toBe(15);
    expect([...values.entries()].filter(([, n]) => n !== 1)).toEqual([]);
  });
});
