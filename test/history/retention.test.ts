// The history table on plain PostgreSQL: partitions laid out by HISTORY_CHUNK_INTERVAL, created
// ahead by the service and on demand by the shard workers, and HISTORY_RETENTION_DAYS applied
// by dropping whole partitions.
import crypto from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { countOf } from '../helpers/db.js';
import { createDevice, createTemplate, deviceClient, eventually, historyCount, insertHistory } from '../helpers/registry-fixtures.js';
import { freshDatabase, startTestService, type TestService } from '../helpers/service.js';

const running: TestService[] = [];
afterAll(async () => {
  for (const s of running) await s.stop().catch(() => undefined);
});
// Each test stops what it started (every service holds a dozen database connections).
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop().catch(() => undefined);
});

async function start(env: Record<string, string | undefined>): Promise<TestService> {
  const s = await startTestService(env);
  running.push(s);
  return s;
}

async function partitions(s: TestService): Promise<Array<{ name: string; range_start: Date; range_end: Date }>> {
  return (
    await s.service.pool.query<{ name: string; range_start: Date; range_end: Date }>(
      'SELECT name, range_start, range_end FROM history_partitions ORDER BY range_start',
    )
  ).rows;
}

async function tableExists(s: TestService, name: string): Promise<boolean> {
  return (await s.service.pool.query<{ e: boolean }>('SELECT to_regclass($1) IS NOT NULL AS e', [name])).rows[0]!.e;
}

describe('partitions', () => {
  it('the table is partitioned by HISTORY_CHUNK_INTERVAL, with the previous, current and next two chunks ready', async () => {
    const s = await start({ HISTORY_CHUNK_INTERVAL: '1 hour' });
    const settings = (
      await s.service.pool.query<{ timescale: boolean; secs: string }>(
        'SELECT timescale, extract(epoch FROM chunk_interval) AS secs FROM history_settings',
      )
    ).rows[0]!;
    expect(settings.timescale).toBe(false); // this machine has no TimescaleDB; the plain path is what runs here
    expect(Number(settings.secs)).toBe(3600);
    const parts = await partitions(s);
    expect(parts.length).toBeGreaterThanOrEqual(4);
    for (const p of parts) expect(p.range_end.getTime() - p.range_start.getTime()).toBe(3_600_000);
    const now = Date.now();
    expect(parts.some((p) => p.range_start.getTime() <= now && now < p.range_end.getTime())).toBe(true);
    expect(parts.some((p) => p.range_start.getTime() >= now + 3_600_000)).toBe(true);
    const kind = (await s.service.pool.query<{ relkind: string }>("SELECT relkind FROM pg_class WHERE relname = 'history'")).rows[0]!
      .relkind;
    expect(kind).toBe('p');
  });

  it('a message with a timestamp outside the prepared partitions gets its partition on demand', async () => {
    const s = await start({});
    const tenant = `prt${crypto.randomBytes(3).toString('hex')}`;
    const t = await createTemplate(s.service.pool, tenant, 't', [{ label: 'v', type: 'dynamic', value_type: 'float' }]);
    const d = await createDevice(s.service.pool, tenant, [t]);
    const c = await deviceClient(s.env.MQTT_URL!);
    await c.publishAsync(`${tenant}:${d}/attrs`, JSON.stringify({ v: 1, timestamp: '2021-06-15T08:00:00Z' }), { qos: 1 });
    await c.endAsync();
    await eventually(async () => (await historyCount(s.service.pool, tenant, d)) === 1 || undefined, 'the old value');
    expect(await tableExists(s, 'history_20210615_0000')).toBe(true);
  });

  it('a changed HISTORY_CHUNK_INTERVAL keeps the layout the partitions were created with', async () => {
    const db = await freshDatabase();
    const first = await start({ DATABASE_URL: db, HISTORY_CHUNK_INTERVAL: '1 day' });
    await first.stop();
    const second = await start({ DATABASE_URL: db, HISTORY_CHUNK_INTERVAL: '6 hours' });
    const secs = (
      await second.service.pool.query<{ secs: string }>('SELECT extract(epoch FROM chunk_interval) AS secs FROM history_settings')
    ).rows[0]!.secs;
    expect(Number(secs)).toBe(86400);
  });
});

describe('retention (HISTORY_RETENTION_DAYS)', () => {
  it('drops whole partitions older than the retention and keeps everything newer', async () => {
    const db = await freshDatabase();
    const tenant = `ret${crypto.randomBytes(3).toString('hex')}`;
    const day = 86_400_000;
    const iso = (msAgo: number) => new Date(Date.now() - msAgo).toISOString();
    const first = await start({ DATABASE_URL: db });
    await insertHistory(first.service.pool, [
      { tenant, device: 'aa', attr: 'v', ts: iso(10 * day), value: '1' },
      { tenant, device: 'aa', attr: 'v', ts: iso(9 * day), value: '2' },
      { tenant, device: 'aa', attr: 'v', ts: iso(1 * day), value: '3' },
      { tenant, device: 'aa', attr: 'v', ts: iso(0), value: '4' },
    ]);
    const before = await partitions(first);
    const old = before.filter((p) => p.range_end.getTime() <= Date.now() - 3 * day).map((p) => p.name);
    expect(old).toHaveLength(2);
    await first.stop();

    // The next start applies HISTORY_RETENTION_DAYS=3.
    const second = await start({ DATABASE_URL: db, HISTORY_RETENTION_DAYS: '3' });
    for (const name of old) expect(await tableExists(second, name)).toBe(false);
    const values = (
      await second.service.pool.query<{ value: string }>('SELECT value FROM history WHERE tenant = $1 ORDER BY ts', [tenant])
    ).rows.map((r) => r.value);
    expect(values).toEqual(['3', '4']);
    const remaining = (await partitions(second)).map((p) => p.name);
    for (const name of old) expect(remaining).not.toContain(name);
  });

  it('without HISTORY_RETENTION_DAYS nothing is dropped', async () => {
    const s = await start({});
    const tenant = `keep${crypto.randomBytes(3).toString('hex')}`;
    await insertHistory(s.service.pool, [{ tenant, device: 'bb', attr: 'v', ts: '2001-01-01T00:00:00Z', value: '1' }]);
    expect(await countOf(s.service.pool, 'SELECT history_apply_retention(NULL) AS n')).toBe(0);
    expect(await historyCount(s.service.pool, tenant)).toBe(1);
  });
});
