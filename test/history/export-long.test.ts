// An export is unbounded in time as in rows: it outlives DB_STATEMENT_TIMEOUT_MS (the bound on
// every other statement) when the table is large or the client reads slowly (docs/messaging.md
// §6 "Streamed export").
import pg from 'pg';
import { beforeAll, expect, it } from 'vitest';
import { createDevice, createTemplate } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';

const TIMEOUT_MS = 1000;
const ROWS = 200_000;
const svc = useService({ DB_STATEMENT_TIMEOUT_MS: String(TIMEOUT_MS) });
let token: string;
let device: string;

beforeAll(async () => {
  let tenant: string;
  ({ tenant, token } = await svc.freshTenant('exl'));
  // The fixture's own connection: the service's pool would cut this load at the timeout too.
  const db = new pg.Client({ connectionString: svc.env.DATABASE_URL });
  await db.connect();
  try {
    const template = await createTemplate(db, tenant, 'sensor', [{ label: 'temperature', type: 'dynamic', value_type: 'float' }]);
    device = await createDevice(db, tenant, [template]);
    await db.query(`SELECT history_ensure_partition(t) FROM generate_series('2024-06-01'::timestamptz, '2024-06-04', '1 hour') t`);
    await db.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT $1, $2, 'temperature', history_series($1, $2, 'temperature'), '2024-06-01'::timestamptz + i * interval '1 second', i::text
         FROM generate_series(1, $3::int) i`,
      [tenant, device, ROWS],
    );
  } finally {
    await db.end();
  }
});

it(`a client that reads slowly gets every row, though the export runs longer than DB_STATEMENT_TIMEOUT_MS (${TIMEOUT_MS} ms)`, async () => {
  const started = Date.now();
  const res = await fetch(`${svc.base}/history/export?devices=${device}&format=csv`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let paused = false;
  for (;;) {
    const chunk = await reader.read();
    if (chunk.done) break;
    text += decoder.decode(chunk.value as Uint8Array, { stream: true });
    if (!paused) {
      // Not reading for a while: the COPY waits on the socket, its statement clock running past
      // the server's timeout and the client-side one (5 s later: src/db/limits.ts).
      paused = true;
      await new Promise((r) => setTimeout(r, TIMEOUT_MS + 6000));
    }
  }
  expect(Date.now() - started).toBeGreaterThan(TIMEOUT_MS + 6000);
  const lines = text.trimEnd().split('\n');
  expect(lines[0]).toBe('ts,device_id,attr,value');
  expect(lines).toHaveLength(ROWS + 1);
  expect(lines.at(-1)).toBe(`2024-06-03T07:33:20.000000Z,${device},temperature,${ROWS}`);
});

it('an export that gets no pool connection (every one busy) answers 503 like any read, not a 200 that looks complete and empty', async () => {
  const pool = svc.service.pool;
  const held = await Promise.all(Array.from({ length: pool.options.max }, () => pool.connect()));
  try {
    // The pool's wait for a connection (10 s) runs out before any row was written.
    const res = await fetch(`${svc.base}/history/export?devices=${device}&format=csv`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ message: 'Database unavailable', status: 503 });
  } finally {
    for (const c of held) c.release();
  }
  const again = await fetch(`${svc.base}/history/export?devices=${device}&format=csv&dateTo=2024-06-01T00:00:02Z`, {
    headers: { authorization: `Bearer ${token}` },
  });
  expect(again.status).toBe(200);
  expect(await again.text()).toBe(
    'ts,device_id,attr,value\n2024-06-01T00:00:01.000000Z,' +
      device +
      ',temperature,1\n2024-06-01T00:00:02.000000Z,' +
      device +
      ',temperature,2\n',
  );
});

it('a client that takes nothing for longer than uWebSockets.js allows (about 10 s) is disconnected: the body is cut short and the COPY cancelled', async () => {
  const res = await fetch(`${svc.base}/history/export?devices=${device}&format=csv`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value as Uint8Array, { stream: true });
  // Nothing read for 16 s: the socket buffers fill, no write can go out, uWS's timer closes the
  // connection (it is reset by writes only; src/http/server.ts cannot change it).
  await new Promise((r) => setTimeout(r, 16_000));
  const db = new pg.Client({ connectionString: svc.env.DATABASE_URL });
  await db.connect();
  try {
    const { rows } = await db.query(
      `SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND query LIKE 'COPY (SELECT%' AND query LIKE $1`,
      [`%${device}%`],
    );
    expect(rows).toEqual([]);
  } finally {
    await db.end();
  }
  let cut = false;
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      text += decoder.decode(chunk.value as Uint8Array, { stream: true });
    }
  } catch {
    cut = true; // the chunked body ended without its terminator
  }
  expect(cut).toBe(true);
  expect(text.trimEnd().split('\n').length).toBeLessThan(ROWS + 1);
}, 40_000);
