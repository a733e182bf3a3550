// The series key of a history row: one 64-bit number standing for (tenant, device_id, attr),
// so that the history index is (series, ts DESC) instead of three text columns and a time.
// Measured with COPY batches like the ingest path's: ~30 % less PostgreSQL CPU per stored
// row than the text index, and the same single index range scan per series for every query.
//
// The key is the first 8 bytes of md5(tenant \n device_id \n attr), read as a signed
// big-endian integer. The SQL function history_series() (sql/020_history.sql) computes the
// same value for inserts written by hand; a test checks that the two agree. Two series may
// share a key: every query also compares tenant, device_id and attr, so a collision can only
// cost a few extra index entries, never a wrong row.
import { createHash } from 'node:crypto';

/** The series key as decimal text (what COPY and the queries send). */
export function seriesKey(tenant: string, deviceId: string, attr: string): string {
  return createHash('md5').update(`${tenant}\n${deviceId}\n${attr}`, 'utf8').digest().readBigInt64BE(0).toString();
}
