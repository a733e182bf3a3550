// Times and reads shared by the history tests (rows are written directly with these times).
import type { HistoryRecord } from '../helpers/api.js';
import type pg from 'pg';
import { createDevice, createTemplate, insertHistory } from '../helpers/registry-fixtures.js';
import { http } from '../helpers/service.js';

/** 2024-05-01T12:<minute>:00 UTC as the history answers it. */
export const ts = (minute: number) => `2024-05-01T12:${String(minute).padStart(2, '0')}:00.000000Z`;

/** GET /history/device/{id}/history as `token`: an array for one `attr`, else an object by label (`T`). */
export const getHistory = <T = HistoryRecord[]>(base: string, token: string, id: string, query: string) =>
  http<T>('GET', `${base}/history/device/${id}/history${query}`, { token });

/** The values of history records, in their order. */
export const valuesOf = (rows: HistoryRecord[]) => rows.map((r) => r.value);

/** A history row as insertHistory writes it. */
export type HistoryRow = Parameters<typeof insertHistory>[1][number];

/**
 * A `sensor` device of `tenant` (temperature, a float; mode, a string) and the rows of its
 * temperature at minutes 0 … 9 (20 … 29), for the caller to insert with its own.
 */
export async function sensorWithTemperatures(pool: pg.Pool, tenant: string): Promise<{ device: string; rows: HistoryRow[] }> {
  const t = await createTemplate(pool, tenant, 'sensor', [
    { label: 'temperature', type: 'dynamic', value_type: 'float' },
    { label: 'mode', type: 'dynamic', value_type: 'string' },
  ]);
  const device = await createDevice(pool, tenant, [t]);
  const rows: HistoryRow[] = [];
  for (let m = 0; m < 10; m++) rows.push({ tenant, device, attr: 'temperature', ts: ts(m), value: String(20 + m) });
  return { device, rows };
}
