// GET /history/device/{id}/history (interface.md §4.5, decisions.md "History"). Records are
// rendered as text: `value` is stored as JSON text and goes out as is, keeping its JSON type.
import type pg from 'pg';
import { errors } from '../errors.js';
import type { Route } from '../http/types.js';
import { historyQueryOf } from './query.js';
import { deviceAttributeLabels, readOneSeriesOfDevice, readSeries, type HistoryRow } from './repo.js';

function record(deviceJson: string, r: HistoryRow): string {
  return `{"device_id":${deviceJson},"ts":"${r.ts}","value":${r.value},"attr":${JSON.stringify(r.attr)}}`;
}

export function historyRoutes({ pool, maxResults }: { pool: pg.Pool; maxResults: number }): Route[] {
  return [
    {
      method: 'GET',
      path: '/history/device/:id/history',
      async handler(req) {
        const id = req.params.id!;
        // The operators were checked against `history.query` before the handler (400 before the device's 404).
        const q = historyQueryOf(req.values, maxResults);
        let labels: string[];
        let rows: HistoryRow[];
        if (q.attrs && q.attrs.length === 1) {
          const series = await readOneSeriesOfDevice(pool, req.tenant, id, q.attrs[0]!, q);
          if (!series) throw errors.noSuchDevice(id);
          labels = q.attrs;
          rows = series;
        } else if (q.attrs) {
          // Both at once: a device of another tenant has no rows here anyway. Labels the device
          // does not have (any more) answer [], whatever rows they left.
          const [has, series] = await Promise.all([deviceAttributeLabels(pool, req.tenant, id), readSeries(pool, req.tenant, id, q.attrs, q)]);
          if (!has) throw errors.noSuchDevice(id);
          const current = new Set(has);
          labels = q.attrs;
          rows = series.filter((r) => current.has(r.attr));
        } else {
          const all = await deviceAttributeLabels(pool, req.tenant, id);
          if (!all) throw errors.noSuchDevice(id);
          labels = all;
          rows = labels.length > 0 ? await readSeries(pool, req.tenant, id, labels, q) : [];
        }
        const deviceJson = JSON.stringify(id);
        if (q.single) return { status: 200, raw: '[' + rows.map((r) => record(deviceJson, r)).join(',') + ']' };
        const byLabel = new Map<string, string[]>(labels.map((l) => [l, []]));
        for (const r of rows) byLabel.get(r.attr)?.push(record(deviceJson, r));
        const parts: string[] = [];
        for (const [label, records] of byLabel) parts.push(`${JSON.stringify(label)}:[${records.join(',')}]`);
        return { status: 200, raw: '{' + parts.join(',') + '}' };
      },
    },
  ];
}
