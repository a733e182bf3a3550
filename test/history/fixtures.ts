// Times and reads shared by the history tests (rows are written directly with these times).
import type { HistoryRecord } from '../helpers/api.js';
import { http } from '../helpers/service.js';

/** 2024-05-01T12:<minute>:00 UTC as the history answers it. */
export const ts = (minute: number) => `2024-05-01T12:${String(minute).padStart(2, '0')}:00.000000Z`;

/** GET /history/device/{id}/history as `token`: an array for one `attr`, else an object by label (`T`). */
export const getHistory = <T = HistoryRecord[]>(base: string, token: string, id: string, query: string) =>
  http<T>('GET', `${base}/history/device/${id}/history${query}`, { token });

/** The values of history records, in their order. */
export const valuesOf = (rows: HistoryRecord[]) => rows.map((r) => r.value);
