// A long export and the history housekeeping (docs/messaging.md §6 "Streamed export"): the
// housekeeping rewrites history's row triggers (hourly for rollups, per chunk for the open
// region) and creates and drops partitions, statements that need history's ACCESS EXCLUSIVE
// lock. An export holds an ACCESS SHARE lock on it for as long as it streams, and a statement
// waiting for the exclusive lock makes every later reader of the table wait behind it: without a
// bound on that wait, every history read waited for the export's end (or for the housekeeping's
// statement timeout, 60 s by default).
import { beforeAll, expect, it } from 'vitest';
import { createDevice, createTemplate, deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';

const ROWS = 400_000;
const svc = useService();
let tenant: string;
let token: string;
let device: string;

beforeAll(async () => {
  ({ tenant, token } = await svc.freshTenant('exm'));
  const pool = svc.service.pool;
  const template = await createTemplate(pool, tenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
  device = await createDevice(pool, tenant, [template]);
  // In the open region (the last 5.6 hours; the partitions the service made at start), which
  // the latest-value reads below look at.
  await pool.query(
    `INSERT INTO history (tenant, device_id, attr, series, ts, value)
     SELECT $1, $2, 'temperature', history_series($1, $2, 'temperature'), now() - i * interval '50 ms', i::text
       FROM generate_series(1, $3::int) i`,
    [tenant, device, ROWS],
  );
}, 60_000);

it('history reads wait at most a moment for the housekeeping while an export streams to a slow reader', async () => {
  const auth = { authorization: `Bearer ${token}` };
  const res = await fetch(`${svc.base}/history/export?devices=${device}&format=csv`, { headers: auth });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  let rows = 0;
  let done = false;
  // A slow, steady reader (never stalled long enough for uWS to close the connection).
  const reading = (async () => {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      for (const b of chunk.value as Uint8Array) if (b === 10) rows++;
      await new Promise((r) => setTimeout(r, 100));
    }
    done = true;
  })();
  await new Promise((r) => setTimeout(r, 500));
  // The housekeeping's pass of a new hour: its trigger is written again (as once an hour).
  await svc.service.pool.query(
    `UPDATE history_settings SET rollup_noted_before = rollup_noted_before - interval '1 hour', rolled_before = rolled_before - interval '1 hour'`,
  );
  const pass = svc.service.historyMaintenance.rollUp().then(
    () => 'done',
    (err: Error) => err.message,
  );
  await new Promise((r) => setTimeout(r, 300));
  const started = Date.now();
  const read = await fetch(`${svc.base}/history/device/${device}/history?lastN=1&attr=temperature`, { headers: auth });
  const ms = Date.now() - started;
  expect(read.status).toBe(200);
  expect(done).toBe(false); // the export was still streaming while the read waited
  expect(ms).toBeLessThan(3000);
  // The pass gave up rather than waiting for the export; it is tried again later.
  expect(await pass).toMatch(/lock timeout/);
  await reading;
  expect(rows).toBe(ROWS + 1);
  // With no export, the pass goes through.
  expect(await svc.service.historyMaintenance.rollUp().then(() => 'done')).toBe('done');
}, 120_000);

it('a message for a partition not made yet is stored at once while an export streams to a slow reader', async () => {
  // Plain partitions: ingest makes the partition of a time outside the prepared ones on demand;
  // made with CREATE TABLE ... PARTITION OF (ACCESS EXCLUSIVE on history) it waited for the
  // export's end, and every read of history queued behind it. TimescaleDB makes its chunks
  // itself; the same check holds.
  const auth = { authorization: `Bearer ${token}` };
  const res = await fetch(`${svc.base}/history/export?devices=${device}&format=csv`, { headers: auth });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  let done = false;
  const reading = (async () => {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    done = true;
  })();
  await new Promise((r) => setTimeout(r, 500));
  const c = await deviceClient(svc.env.MQTT_URL!);
  const started = Date.now();
  await c.publishAsync(`${tenant}:${device}/attrs`, JSON.stringify({ temperature: 1.5, timestamp: '2017-06-01T12:00:00Z' }), { qos: 1 });
  await c.endAsync();
  // A read of history while ingest makes the partition (or has made it).
  await new Promise((r) => setTimeout(r, 1000));
  const readStarted = Date.now();
  const read = await fetch(`${svc.base}/history/device/${device}/history?lastN=1&attr=temperature`, { headers: auth });
  const readMs = Date.now() - readStarted;
  const old = `${svc.base}/history/device/${device}/history?attr=temperature&dateTo=2017-06-02T00:00:00Z`;
  const stored = await eventually(async () => {
    const rows = (await (await fetch(old, { headers: auth })).json()) as unknown[];
    return rows.length > 0 ? rows : undefined;
  }, 'the 2017 value');
  const storedMs = Date.now() - started;
  expect(stored).toEqual([{ device_id: device, attr: 'temperature', value: 1.5, ts: '2017-06-01T12:00:00.000000Z' }]);
  expect(read.status).toBe(200);
  expect(done).toBe(false); // the export was still streaming meanwhile
  expect({ storedMs: storedMs < 3000, readMs: readMs < 3000 }).toEqual({ storedMs: true, readMs: true });
  await reader.cancel();
  await reading;
}, 120_000);
