// Aggregates on GET /history/device/{id}/history (`interval`, `agg`, `tz`, `fill`; docs/messaging.md
// §6 "Aggregates"): the parameters checked together, the device's attributes looked up, and
// the buckets of each attribute rendered, one attribute alone as an array and several (or none)
// as an object by label, like the raw answer.
import type pg from 'pg';
import { errors } from '../errors.js';
import type { QueryValues } from '../schemas/validator.js';
import { readBuckets, spanOf, type BucketAsk, type BucketRow } from './aggregate-repo.js';
import {
  AGGREGATE_LIST,
  aggregatesOf,
  bucketingOf,
  isZoneName,
  NUMERIC_AGGREGATES,
  NUMERIC_VALUE_TYPES,
  unknownZone,
  type Aggregate,
  type Bucketing,
} from './buckets.js';
import type { HistoryQuery } from './query.js';
import { deviceAttributeTypes } from './repo.js';
import { databaseZone } from './zones.js';

export interface AggregateQuery extends BucketAsk {
  /** `tz` as asked (default UTC); the bucketing holds the spelling given to PostgreSQL (zones.ts). */
  tz: string;
}

const bad = errors.badHistoryQuery;
const noAgg = () => bad(`interval needs agg: any of ${AGGREGATE_LIST}`);
const notAZone = (tz: string) => bad(`tz must be an IANA time zone name (e.g. Europe/Berlin), got "${tz}"`);

/** Whether the request asks for aggregates (any of the aggregate parameters present). */
export const asksAggregates = (v: QueryValues) =>
  v.interval !== undefined || v.agg !== undefined || v.tz !== undefined || v.fill !== undefined;

/**
 * The aggregate parameters checked together (each alone was checked by the query schema):
 * interval and agg both needed, no lastN/firstN, a known zone. Throws the 400.
 */
export function aggregateQueryOf(v: QueryValues): AggregateQuery {
  if (v.interval === undefined) throw bad('agg, tz and fill need interval (e.g. interval=1h&agg=avg)');
  if (v.lastN !== undefined || v.firstN !== undefined)
    throw bad('lastN and firstN cannot be used with interval: choose the buckets with dateFrom and dateTo');
  if (v.agg === undefined) throw noAgg();
  const asked = aggregatesOf(v.agg as string[]);
  if ('unknown' in asked) throw bad(`agg must be any of ${AGGREGATE_LIST}, got "${asked.unknown}"`);
  if (asked.aggs.length === 0) throw noAgg();
  const tz = ((v.tz as string | undefined) ?? 'UTC').trim();
  if (!isZoneName(tz)) throw notAZone(tz);
  const bucketing = bucketingOf(v.interval as string, tz);
  if (typeof bucketing === 'string') throw bad(bucketing);
  return { bucketing, aggs: asked.aggs, fill: v.fill === 'null', tz };
}

function bucketJson(r: BucketRow, aggs: Aggregate[]): string {
  let out = `{"ts":"${r.ts}"`;
  // Numbers and counts as PostgreSQL wrote them; first/last are the stored JSON values.
  for (const a of aggs) out += `,"${a}":${r[a] ?? 'null'}`;
  return out + '}';
}

/** Where an aggregate request reads: the pool, the tenant's device, and HISTORY_MAX_BUCKETS. */
export interface AggregateRead {
  pool: pg.Pool;
  tenant: string;
  id: string;
  /** HISTORY_MAX_BUCKETS, checked per attribute on the range before its rows are read. */
  maxBuckets: number;
}

/** The answer of an aggregate request: undefined when there is no such device. */
export async function answerAggregates(read: AggregateRead, q: HistoryQuery, a: AggregateQuery): Promise<string | undefined> {
  const { pool, tenant, id, maxBuckets } = read;
  const zone = await databaseZone(pool, a.tz);
  if (zone === undefined) throw notAZone(a.tz);
  const bucketing: Bucketing = a.bucketing.kind === 'calendar' ? { ...a.bucketing, tz: zone } : a.bucketing;
  const types = await deviceAttributeTypes(pool, tenant, id);
  if (!types) return undefined;
  const labels = q.attrs ?? [...types.keys()];
  // Numeric aggregates of an attribute that does not hold numbers: 400 before anything is read.
  const numeric = a.aggs.filter((x) => NUMERIC_AGGREGATES.has(x));
  for (const label of labels) {
    const t = types.get(label);
    if (t !== undefined && numeric.length > 0 && !t.every((vt) => NUMERIC_VALUE_TYPES.has(vt)))
      throw bad(
        `${numeric.join(', ')} ${numeric.length === 1 ? 'needs' : 'need'} a numeric attribute (float or integer); "${label}" is ${t.join(', ')}: use count, first or last`,
      );
  }
  const range = { from: q.from, to: q.to };
  try {
    // Labels the device does not have (any more) answer [], whatever rows they left.
    const spans = await Promise.all(
      labels.map((label) => (types.has(label) ? spanOf(pool, { tenant, id, label }, range, bucketing) : Promise.resolve(undefined))),
    );
    spans.forEach((s, i) => {
      if (s && !s.empty && s.buckets > maxBuckets)
        throw bad(
          `interval ${a.bucketing.text} gives ${s.buckets} buckets for "${labels[i]}"; at most ${maxBuckets} (HISTORY_MAX_BUCKETS): use a longer interval or a shorter dateFrom..dateTo`,
        );
    });
    const parts = await Promise.all(
      labels.map(async (label, i) => {
        const s = spans[i];
        if (!s || s.empty || s.buckets === 0) return '[]';
        const rows = await readBuckets(pool, { tenant, id, label }, s, { bucketing, aggs: a.aggs, fill: a.fill });
        return '[' + rows.map((r) => bucketJson(r, a.aggs)).join(',') + ']';
      }),
    );
    if (q.single) return parts[0]!;
    return '{' + labels.map((l, i) => `${JSON.stringify(l)}:${parts[i]}`).join(',') + '}';
  } catch (err) {
    if (unknownZone(err)) throw notAZone(a.tz);
    throw err;
  }
}
