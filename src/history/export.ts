// Streamed history export (CSV or NDJSON): the history endpoint with `Accept: text/csv` or
// `application/x-ndjson`, and GET /history/export for a whole tenant. PostgreSQL writes the
// lines itself (`COPY (SELECT …) TO STDOUT`, pg-copy-streams), and they go to the client as they
// come: when the client does not keep up (uWS's write returns false) the copy stream is paused,
// so PostgreSQL's socket fills and it waits; memory stays at a few chunks whatever the row count.
// A client that goes away cancels the statement (pg_cancel_backend) and the connection is
// discarded, not returned to the pool mid-COPY.
//
// COPY takes no parameters: the values (tenant, ids, labels, bounds) are written in as literals
// with the driver's escapeLiteral.
import type pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { liftTimeouts } from '../db/limits.js';
import type { StreamOut } from '../types/stream.js';
import { historyTimeSql } from '../time.js';

export type ExportFormat = 'csv' | 'ndjson';

export const EXPORT_CONTENT_TYPES: Record<ExportFormat, string> = {
  csv: 'text/csv; charset=utf-8',
  ndjson: 'application/x-ndjson',
};

/**
 * The format an `Accept` header asks for, if it names one of ours and prefers it to JSON
 * (RFC 9110 §12.5.1: each type gets the q of the most specific range that matches it). CSV and
 * NDJSON count only where named; JSON also through `application/*` and `*\/*`. A tie keeps JSON
 * (the contract's answer), then CSV before NDJSON.
 */
export function exportFormatOf(accept: string): ExportFormat | undefined {
  const ranges = accept
    .toLowerCase()
    .split(',')
    .map((r) => {
      const [type = '', ...params] = r.split(';').map((s) => s.trim());
      const q = params.find((p) => p.startsWith('q='));
      return { type, q: q === undefined ? 1 : Number(q.slice(2)) || 0 };
    });
  const qOf = (...types: string[]) => {
    for (const t of types) {
      const r = ranges.find((x) => x.type === t);
      if (r) return r.q;
    }
    return 0;
  };
  const json = qOf('application/json', 'application/*', '*/*');
  const csv = qOf('text/csv');
  const ndjson = qOf('application/x-ndjson');
  if (Math.max(csv, ndjson) <= json) return undefined;
  return csv >= ndjson ? 'csv' : 'ndjson';
}

/** A field as COPY ... (FORMAT csv) writes it: quoted when it holds a quote, comma or line break. */
function csvField(text: string): string {
  return /[",\r\n]/.test(text) || text === '' ? `"${text.replace(/"/g, '""')}"` : text;
}

/** One history record as a CSV line, byte for byte as the streamed export writes it. */
export function csvLine(deviceId: string, r: { ts: string; attr: string; value: string }): string {
  return `${r.ts},${csvField(deviceId)},${csvField(r.attr)},${csvField(r.value)}\n`;
}

export const CSV_HEADER = 'ts,device_id,attr,value\n';

export interface ExportQuery {
  tenant: string;
  /** Device ids; undefined: every device of the tenant (or of `template`). */
  devices: string[] | undefined;
  template: number | undefined;
  /** Labels; undefined: all. */
  attrs: string[] | undefined;
  /** Bounds as timestamptz text. */
  from: string | undefined;
  to: string | undefined;
  /** Oldest first (one device's export); the tenant-wide export comes in storage order. */
  ordered: boolean;
}

function exportSql(q: ExportQuery, format: ExportFormat, lit: (v: string) => string): string {
  // A NUL character is in no id or label (PostgreSQL text cannot hold one, nor a statement): such
  // a name matches nothing.
  const arr = (vs: string[]) =>
    `ARRAY[${vs
      .filter((v) => !v.includes('\0'))
      .map(lit)
      .join(',')}]::text[]`;
  const t = lit(q.tenant);
  let where = `h.tenant = ${t}`;
  // Only rows of devices the tenant has now (as the history endpoint answers).
  where += ` AND h.device_id IN (SELECT id FROM devices WHERE tenant = ${t}${q.devices ? ` AND id = ANY(${arr(q.devices)})` : ''})`;
  if (q.template !== undefined)
    where += ` AND h.device_id IN (SELECT device_id FROM device_templates WHERE tenant = ${t} AND template_id = ${Math.trunc(q.template)})`;
  if (q.attrs) where += ` AND h.attr = ANY(${arr(q.attrs)})`;
  // Only labels the device has now (its templates'): rows of a label it no longer has stay in
  // the table but are not answered, as by every history read.
  where += ` AND EXISTS (SELECT 1 FROM device_templates dt
                          JOIN template_attrs a ON a.tenant = dt.tenant AND a.template_id = dt.template_id AND a.parent_id IS NULL
                         WHERE dt.tenant = h.tenant AND dt.device_id = h.device_id AND a.label = h.attr)`;
  if (q.from !== undefined) where += ` AND h.ts >= ${lit(q.from)}::timestamptz`;
  if (q.to !== undefined) where += ` AND h.ts <= ${lit(q.to)}::timestamptz`;
  const order = q.ordered ? ' ORDER BY h.ts, h.attr' : '';
  if (format === 'csv')
    return `COPY (SELECT ${historyTimeSql('h.ts')} AS ts, h.device_id, h.attr, h.value FROM history h WHERE ${where}${order})
            TO STDOUT WITH (FORMAT csv, HEADER true)`;
  // One JSON object per line. CSV mode with a delimiter and quote that JSON text never holds
  // unescaped (control characters) writes each line as it is, without COPY's text escaping.
  const line = `'{"device_id":' || to_json(h.device_id)::text || ',"ts":"' || ${historyTimeSql('h.ts')} || '","value":' || h.value || ',"attr":' || to_json(h.attr)::text || '}'`;
  return `COPY (SELECT ${line} FROM history h WHERE ${where}${order}) TO STDOUT WITH (FORMAT csv, DELIMITER E'\\x02', QUOTE E'\\x01')`;
}

/** Streams the export to `out`; resolves when done or when the client went away (the query cancelled). */
export async function streamExport(pool: pg.Pool, q: ExportQuery, format: ExportFormat, out: StreamOut): Promise<void> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    // Unbounded in time as in rows: a large tenant or a slow reader takes longer than the
    // time bounds of every other statement (a dead database is still noticed by TCP keepalive, a
    // client that goes away by onAbort below).
    const restore = await liftTimeouts(client);
    const sql = exportSql(q, format, (v) => client.escapeLiteral(v));
    const copy = client.query(copyTo(sql));
    // The backend's pid, to cancel the COPY: pg sets `processID` at runtime; @types/pg does not declare it.
    const pid = (client as unknown as { processID: number }).processID;
    await new Promise<void>((resolve, reject) => {
      let cancelled = false;
      out.onAbort(() => {
        cancelled = true;
        copy.pause();
        // Stop the statement on the server; the copy stream then fails and the client is discarded.
        pool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => undefined);
        broken = new Error('client went away');
        resolve();
      });
      copy.on('data', (chunk: Buffer) => {
        if (!out.write(chunk)) {
          copy.pause();
          void out.drained().then(() => {
            if (!cancelled) copy.resume();
          });
        }
      });
      copy.on('end', () => resolve());
      copy.on('error', (err: Error) => {
        broken = err;
        if (cancelled) resolve();
        else reject(err);
      });
    });
    if (!broken) await restore();
  } catch (err) {
    broken ??= err instanceof Error ? err : new Error(String(err));
    throw err;
  } finally {
    // A connection left mid-COPY (cancelled, or failed), or without its statement timeout, is
    // not given back to the pool.
    client.release(broken ?? false);
  }
}
