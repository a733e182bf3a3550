// The contract's timestamp formats (decisions.md "Timestamps"):
//   created/updated: UTC `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`; history ts: UTC `...ffffffZ`.
// PostgreSQL keeps microseconds and JS Dates do not, so queries format timestamps in SQL.

/** SQL expression rendering a timestamptz column as the contract's created/updated text. */
export function registryTimeSql(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')`;
}

/** SQL expression rendering a timestamptz column as the contract's history `ts` text. */
export function historyTimeSql(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** A JS Date in the created/updated format (microseconds are the milliseconds padded). */
export function registryTime(d: Date): string {
  return d.toISOString().replace('Z', '000+00:00');
}

/** A JS Date in the history `ts` format. */
export function historyTime(d: Date): string {
  return d.toISOString().replace('Z', '000Z');
}
