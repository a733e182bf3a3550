// GET /history/device/{id}/history (interface.md §4.5, decisions.md "History"): HTTP in and
// out, and what the API description says of it. Records are rendered as text: `value` is
// stored as JSON text and goes out as is, keeping its JSON type.
import type pg from 'pg';
import { errors } from '../errors.js';
import { unknownParameter } from '../http/query.js';
import type { Example, Reply, RouteSpec } from '../http/types.js';
import { DEV, err } from '../openapi/examples.js';
import { deviceIdParam } from '../schemas/params.js';
import { ref } from '../schemas/responses.js';
import { aggregateQueryOf, answerAggregates, asksAggregates } from './aggregate.js';
import { AGG_LIST_PATTERN, AGGREGATE_LIST, INTERVAL_PATTERN } from './buckets.js';
import { latestBody, latestJson, latestRequestOf, latestValues, MAX_LATEST_DEVICES, templateDeviceCount } from './latest.js';
import { CSV_HEADER, csvLine, EXPORT_CONTENT_TYPES, exportFormatOf, streamExport, type ExportFormat } from './export.js';
import { historyQueryOf } from './query.js';
import { MAX_HELD_READS, type ReadGate } from './read-gate.js';
import { deviceAttributeLabels, readOneSeriesOfDevice, readSeries, type HistoryRow } from './repo.js';

/** The 503 of the reads the read gate holds (src/history/read-gate.ts). */
const HELD_READS_TEXT =
  `While ingest has messages in hand and the host's CPUs are saturated, these reads wait their turn (at most ` +
  `HISTORY_READ_SHARE_PERCENT of the time goes to them); with ${MAX_HELD_READS} already waiting, 503.`;

/** lastN / firstN: the contract's 400 names the operator and what was sent. */
const historyCount = (name: 'lastN' | 'firstN', max: number, description: string) => {
  const notCount = { error: 'badHistoryQuery', message: `${name} must be a non-negative integer, got "{input}"` };
  return {
    type: 'integer',
    minimum: 0,
    maximum: max,
    description,
    'x-error': {
      type: notCount,
      minimum: notCount,
      maximum: { error: 'badHistoryQuery', message: `${name} must be at most {limit}, got {value}` },
    },
  };
};

/** dateFrom / dateTo: format `timestamp` (src/schemas/queries.ts), read by the handler with the same parse. */
const historyBound = (name: 'dateFrom' | 'dateTo', description: string) => ({
  type: 'string',
  format: 'timestamp',
  description: `${description} ISO 8601 date and time (no zone: UTC), or epoch milliseconds; blank: no bound.`,
  'x-error': {
    format: { error: 'badHistoryQuery', message: `${name} must be an ISO 8601 date and time (e.g. 2024-05-01T12:00:00Z), got "{input}"` },
  },
});

/** The streamed answers of the history endpoint and the export. */
const STREAMED_ANSWERS = [
  { contentType: 'text/csv', schema: { type: 'string', description: 'CSV with a header line: ts,device_id,attr,value' } },
  { contentType: 'application/x-ndjson', schema: { type: 'string', description: 'One JSON history record a line' } },
];
const example = (value: number, minute: number) => ({
  device_id: DEV,
  ts: `2026-05-01T12:0${minute}:00.000000Z`,
  value,
  attr: 'temperature',
});
const CSV_EXAMPLE =
  'ts,device_id,attr,value\n2026-05-01T12:00:00.000000Z,a1b2c3,temperature,21.5\n2026-05-01T12:01:00.000000Z,a1b2c3,temperature,22\n';
const NDJSON_EXAMPLE = [example(21.5, 0), example(22, 1)].map((r) => JSON.stringify(r) + '\n').join('');

/** An example of the history endpoint's streamed answer, the media type chosen by Accept. */
const streamedTemperatures = (name: string, summary: string, contentType: string, response: string): Example => ({
  name,
  summary,
  query: { attr: ['temperature'] },
  headers: { accept: contentType },
  status: 200,
  contentType,
  response,
});

function record(deviceJson: string, r: HistoryRow): string {
  return `{"device_id":${deviceJson},"ts":"${r.ts}","value":${r.value},"attr":${JSON.stringify(r.attr)}}`;
}

/** The query parameters of GET /history/export; any other is refused (a misspelt filter would export the whole tenant). */
const EXPORT_PARAMS = {
  dateFrom: historyBound('dateFrom', 'Inclusive lower bound:'),
  dateTo: historyBound('dateTo', 'Inclusive upper bound:'),
  devices: {
    type: 'array',
    items: { type: 'string' },
    description: 'Device ids, comma-separated or repeated; absent: every device.',
  },
  template: {
    type: 'integer',
    description: 'Only the devices of this template.',
    'x-error': { type: { error: 'badHistoryQuery', message: 'template must be a template id (an integer), got "{input}"' } },
  },
  attr: { type: 'array', items: { type: 'string' }, description: 'Attribute labels, comma-separated or repeated; absent: all.' },
  format: {
    type: 'string',
    enum: ['csv', 'ndjson'],
    description: 'Wins over Accept.',
    'x-error': { enum: { error: 'badHistoryQuery', message: 'format must be csv or ndjson, got "{input}"' } },
  },
};
const EXPORT_PARAM_NAMES: ReadonlySet<string> = new Set(Object.keys(EXPORT_PARAMS));

/**
 * The answers of both routes depend on `Accept` (JSON, CSV or NDJSON): RFC 9110 §12.5.5 asks for
 * `Vary: Accept`, so that a cache between client and service (a browser's, a proxy told to keep
 * authorized answers) does not hand a CSV answer to a request for JSON, or the other way round.
 */
const VARY_ACCEPT = { Vary: 'Accept' };

/** A streamed export answer. */
const exportReply = (format: ExportFormat, stream: Reply['stream']): Reply => ({
  status: 200,
  contentType: EXPORT_CONTENT_TYPES[format],
  headers: VARY_ACCEPT,
  stream,
});

export const historyRoutes: RouteSpec<{ pool: pg.Pool; historyMaxResults: number; historyMaxBuckets: number; historyReads: ReadGate }>[] = [
  {
    method: 'GET',
    path: '/history/device/:id/history',
    negotiates: true,
    summary: 'Stored attribute values of a device',
    description:
      'Same 401 bodies as every route. Values come from device messages (MQTT, docs/messaging.md). The operators are checked ' +
      'before the device: a bad value answers 400 naming the operator (lastN, then firstN, dateFrom, dateTo), whether or not the device exists. ' +
      'With `interval` and `agg`: aggregates per time bucket instead of values. With `Accept: text/csv` or `Accept: application/x-ndjson` ' +
      '(and not application/json, nor with q=0): every value of the range streamed oldest first, as GET /history/export writes them; ' +
      'with lastN or firstN the same records as the JSON answer, label by label in the same order (CSV or NDJSON lines); lastN=0 or firstN=0 means all, as absent (every value streamed); not with interval.',
    tag: 'history',
    params: { id: deviceIdParam },
    query: (l) => ({
      type: 'object',
      properties: {
        lastN: historyCount(
          'lastN',
          l.historyMaxResults,
          `The last N values, newest first. 0 or absent: all (at most ${l.historyMaxResults}, HISTORY_MAX_RESULTS).`,
        ),
        firstN: historyCount('firstN', l.historyMaxResults, 'The first N values, oldest first; wins over lastN.'),
        dateFrom: historyBound('dateFrom', 'Inclusive lower bound:'),
        dateTo: historyBound('dateTo', 'Inclusive upper bound:'),
        attr: {
          type: 'array',
          items: { type: 'string' },
          description:
            'Attribute labels, comma-separated or repeated. One label: an array of records. Several, or none: an object ' +
            '`{label: [records]}` (none: every attribute of the device, `[]` where there is no value). With `interval`: ' +
            'the same shapes, buckets instead of records.',
        },
        interval: {
          type: 'string',
          pattern: INTERVAL_PATTERN,
          description:
            'Aggregates instead of values: the bucket length. `<n>s`, `<n>m`, `<n>h` (n ≥ 1, at most a week; buckets counted ' +
            'from the Unix epoch, UTC) or the calendar units `1d`, `1w` (ISO weeks, from Monday), `1M` (months), which start at ' +
            `local midnight of \`tz\`. Needs \`agg\`; not with lastN/firstN. At most ${l.historyMaxBuckets} buckets (HISTORY_MAX_BUCKETS) ` +
            'per attribute between dateFrom (else the first value) and dateTo (else the last value). Each bucket: ' +
            '`{"ts": <bucket start, UTC>, <agg>: ...}`, in time order; buckets without values are left out unless `fill=null`.',
          'x-error': {
            pattern: {
              error: 'badHistoryQuery',
              message: 'interval must be a count and a unit (s, m, h; e.g. 30s, 15m, 1h) or 1d, 1w, 1M, got "{input}"',
            },
          },
        },
        agg: {
          type: 'array',
          items: {
            type: 'string',
            pattern: AGG_LIST_PATTERN,
            'x-error': {
              pattern: { error: 'badHistoryQuery', message: `agg must be any of ${AGGREGATE_LIST}, got "{input}"` },
            },
          },
          description:
            'With `interval`: the aggregates of each bucket, comma-separated or repeated: `avg`, `min`, `max`, `sum` (float and ' +
            'integer attributes only; sums and averages exact, computed in decimal), `count`, `first`, `last` (the earliest and ' +
            'latest value of the bucket, of any type).',
        },
        tz: {
          type: 'string',
          description:
            'With `interval`: the IANA time zone (e.g. `Europe/Berlin`; default `UTC`) whose local midnight starts the `1d`, `1w` ' +
            'and `1M` buckets, so a day is 23 or 25 hours long across a DST change (where midnight happens twice, the bucket starts at ' +
            'the first). Offsets, POSIX strings and abbreviations that are no zone name (`UTC+3`, `IST`, `PST`): 400. ' +
            'Fixed-length buckets ignore it.',
        },
        fill: {
          type: 'string',
          enum: ['null'],
          description:
            'With `interval`: `null` answers every bucket of the range, those without values with `null` aggregates (`count` 0); ' +
            'a `dateFrom` after `dateTo` has none.',
          'x-error': { enum: { error: 'badHistoryQuery', message: 'fill must be null, got "{input}"' } },
        },
      },
      'x-error-order': ['badHistoryQuery'],
    }),
    responses: {
      200: {
        description:
          'One attr: an array; several or none: an object by label. Records, or with `interval` buckets. With `Accept: text/csv` or ' +
          '`application/x-ndjson`: every value of the range, streamed oldest first (CSV `ts,device_id,attr,value`; NDJSON one record a line); ' +
          "with lastN or firstN the JSON answer's records in that format.",
        schema: { anyOf: [ref('HistorySeries'), ref('HistoryByLabel'), ref('HistoryBuckets'), ref('HistoryBucketsByLabel')] },
        alternatives: STREAMED_ANSWERS,
      },
      400: { description: 'A bad operator value.', errors: ['badHistoryQuery'] },
      404: { description: 'No such device.', errors: ['noSuchDevice'] },
      503: {
        description: `With \`interval\`: ${HELD_READS_TEXT}`,
        errors: ['historyReadsBusy'],
      },
    },
    exampleParams: { id: DEV },
    examples: [
      {
        name: 'lastN',
        summary: 'The last two temperatures',
        query: { lastN: 2, attr: ['temperature'] },
        status: 200,
        response: [example(22, 1), example(21.5, 0)],
      },
      {
        name: 'byLabel',
        summary: 'The last value of every attribute',
        query: { lastN: 1 },
        status: 200,
        response: { temperature: [example(22, 1)], serial: [], led: [], key: [], spare: [] },
      },
      streamedTemperatures('csv', 'Every temperature of the device, as CSV (Accept: text/csv)', 'text/csv', CSV_EXAMPLE),
      streamedTemperatures('ndjson', 'The same as NDJSON (Accept: application/x-ndjson)', 'application/x-ndjson', NDJSON_EXAMPLE),
      {
        name: 'csvLastN',
        summary: 'The last two temperatures as CSV (Accept: text/csv), newest first as in JSON',
        query: { lastN: 2, attr: ['temperature'] },
        headers: { accept: 'text/csv' },
        status: 200,
        contentType: 'text/csv',
        response:
          'ts,device_id,attr,value\n2026-05-01T12:01:00.000000Z,a1b2c3,temperature,22\n2026-05-01T12:00:00.000000Z,a1b2c3,temperature,21.5\n',
      },
      {
        name: 'streamedInterval',
        summary: 'Aggregates asked as CSV',
        query: { attr: ['temperature'], interval: '1h', agg: ['avg'] },
        headers: { accept: 'text/csv' },
        status: 400,
        response: err('badHistoryQuery', 'interval answers JSON only: a CSV or NDJSON answer has the values themselves'),
      },
      {
        name: 'badLastN',
        summary: 'lastN not an integer',
        query: { lastN: 'abc' },
        status: 400,
        response: err('badHistoryQuery', 'lastN must be a non-negative integer, got "abc"'),
      },
      {
        name: 'hourly',
        summary: 'Hourly average, minimum, maximum and count',
        query: {
          attr: ['temperature'],
          interval: '1h',
          agg: ['avg,min,max,count'],
          dateFrom: '2026-05-01T00:00:00Z',
          dateTo: '2026-05-01T23:59:59Z',
        },
        status: 200,
        response: [{ ts: '2026-05-01T12:00:00.000000Z', avg: 21.75, min: 21.5, max: 22, count: 2 }],
      },
      {
        name: 'dailyBerlin',
        summary: 'Local days of Europe/Berlin, empty ones included',
        query: {
          attr: ['temperature'],
          interval: '1d',
          tz: 'Europe/Berlin',
          agg: ['last'],
          fill: 'null',
          dateFrom: '2026-04-30T22:00:00Z',
          dateTo: '2026-05-02T21:59:59Z',
        },
        status: 200,
        response: [
          { ts: '2026-04-30T22:00:00.000000Z', last: 22 },
          { ts: '2026-05-01T22:00:00.000000Z', last: null },
        ],
      },
      {
        name: 'tooManyBuckets',
        summary: 'More buckets than HISTORY_MAX_BUCKETS',
        query: { attr: ['temperature'], interval: '1s', agg: ['count'], dateFrom: '2026-05-01T00:00:00Z', dateTo: '2026-05-02T00:00:00Z' },
        status: 400,
        response: err(
          'badHistoryQuery',
          'interval 1s gives 86401 buckets for "temperature"; at most 1000 (HISTORY_MAX_BUCKETS): use a longer interval or a shorter dateFrom..dateTo',
        ),
      },
      {
        name: 'avgOfString',
        summary: 'avg of a string attribute',
        query: { attr: ['serial'], interval: '1d', agg: ['avg'] },
        status: 400,
        response: err('badHistoryQuery', 'avg needs a numeric attribute (float or integer); "serial" is string: use count, first or last'),
      },
      { name: 'unknown', summary: 'No such device', params: { id: 'ffffff' }, status: 404, response: err('noSuchDevice', 'ffffff') },
    ],
    async handler(req, { pool, historyMaxResults, historyMaxBuckets, historyReads }) {
      const id = req.params.id!;
      // The operators were checked against the query schema before the handler (400 before the device's 404).
      const q = historyQueryOf(req.values, historyMaxResults);
      const format = exportFormatOf(req.accept);
      // lastN/firstN of 0 mean "all", as absent (firstN, even 0, wins over lastN): the stream, uncapped.
      const n = (req.values.firstN ?? req.values.lastN) as number | undefined;
      const counted = n !== undefined && n > 0;
      if (format && asksAggregates(req.values))
        throw errors.badHistoryQuery('interval answers JSON only: a CSV or NDJSON answer has the values themselves');
      if (format && !counted) {
        const labels = await deviceAttributeLabels(pool, req.tenant, id);
        if (!labels) throw errors.noSuchDevice(id);
        const attrs = (q.attrs ?? labels).filter((l) => labels.includes(l));
        const query = { tenant: req.tenant, devices: [id], template: undefined, attrs, from: q.from, to: q.to, ordered: true };
        return exportReply(format, (out) => streamExport(pool, query, format, out));
      }
      if (asksAggregates(req.values)) {
        const a = aggregateQueryOf(req.values);
        const raw = await historyReads.run(() => answerAggregates({ pool, tenant: req.tenant, id, maxBuckets: historyMaxBuckets }, q, a));
        if (raw === undefined) throw errors.noSuchDevice(id);
        return { status: 200, headers: VARY_ACCEPT, raw };
      }
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
        const [has, series] = await Promise.all([
          deviceAttributeLabels(pool, req.tenant, id),
          readSeries(pool, req.tenant, id, q.attrs, q),
        ]);
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
      const byLabel = new Map<string, HistoryRow[]>(labels.map((l) => [l, []]));
      for (const r of rows) byLabel.get(r.attr)?.push(r);
      // lastN/firstN asked as CSV or NDJSON: the same records (at most N a label), label by
      // label in the JSON answer's order, each in the query's order.
      if (format) {
        const grouped = [...byLabel.values()].flat();
        const text =
          format === 'csv'
            ? CSV_HEADER + grouped.map((r) => csvLine(id, r)).join('')
            : grouped.map((r) => record(deviceJson, r) + '\n').join('');
        return { status: 200, contentType: EXPORT_CONTENT_TYPES[format], headers: VARY_ACCEPT, raw: text };
      }
      if (q.single) return { status: 200, headers: VARY_ACCEPT, raw: '[' + rows.map((r) => record(deviceJson, r)).join(',') + ']' };
      const parts: string[] = [];
      for (const [label, series] of byLabel) parts.push(`${JSON.stringify(label)}:[${series.map((r) => record(deviceJson, r)).join(',')}]`);
      return { status: 200, headers: VARY_ACCEPT, raw: '{' + parts.join(',') + '}' };
    },
  },
  {
    method: 'POST',
    path: '/history/latest',
    summary: 'The latest value of chosen attributes of many devices',
    description:
      `One query for up to ${MAX_LATEST_DEVICES} devices (by id, or every device of a template): one entry per device and label ` +
      "that has a value, ordered by device id then label (byte order, whatever the database's locale). Ids that are no device of the tenant, and labels without a value, " +
      'are simply not in the answer.',
    tag: 'history',
    body: { read: 'json', schema: latestBody },
    responses: {
      200: {
        description: 'The latest values.',
        schema: { type: 'array', items: ref('HistoryRecord') },
      },
      400: {
        description: 'A body that is not JSON, or not of this shape, or too many devices.',
        errors: ['payloadNotJson', 'badHistoryQuery'],
      },
      503: { description: HELD_READS_TEXT, errors: ['historyReadsBusy'] },
    },
    examples: [
      {
        name: 'byIds',
        summary: 'The temperature of two devices (d4e5f6 has none)',
        body: { devices: [DEV, 'd4e5f6', 'ffffff'], attrs: ['temperature'] },
        status: 200,
        response: [{ device_id: DEV, attr: 'temperature', ts: '2026-05-01T12:01:00.000000Z', value: 22 }],
      },
      {
        name: 'byTemplate',
        summary: 'Every attribute of every device of template 1',
        body: { template: 1 },
        status: 200,
        response: [{ device_id: DEV, attr: 'temperature', ts: '2026-05-01T12:01:00.000000Z', value: 22 }],
      },
      {
        name: 'both',
        summary: 'devices and template together',
        body: { devices: [DEV], template: 1 },
        status: 400,
        response: err('badHistoryQuery', 'Give exactly one of "devices" and "template"'),
      },
    ],
    async handler(req, { pool, historyReads }) {
      const { sel, labels } = latestRequestOf(req.body);
      if ('template' in sel) {
        const n = await templateDeviceCount(pool, req.tenant, sel.template);
        if (n > MAX_LATEST_DEVICES)
          throw errors.badHistoryQuery(`At most ${MAX_LATEST_DEVICES} devices per request; template ${sel.template} has ${n}`);
      }
      return { status: 200, raw: latestJson(await historyReads.run(() => latestValues(pool, req.tenant, sel, labels))) };
    },
  },
  {
    method: 'GET',
    path: '/history/export',
    negotiates: true,
    summary: 'Export the history of the tenant (streamed CSV or NDJSON)',
    description:
      "Every stored value of the tenant's devices (or of `devices`, or of the devices of `template`) in the range, streamed as " +
      'PostgreSQL produces it, with backpressure: unbounded in rows, bounded in memory. Rows come in storage order (by chunk, ' +
      'roughly by time). A client that disconnects, or takes nothing for about 10 s (uWebSockets.js closes its connection), stops the query; its body ends truncated. The format: `format`, else `Accept` (`text/csv` or ' +
      '`application/x-ndjson`), else NDJSON. CSV columns `ts,device_id,attr,value` (`value` the stored JSON text, quoted as CSV ' +
      'requires); NDJSON one history record per line. Any other query parameter is refused (400): a misspelt filter would export the whole tenant.',
    tag: 'history',
    query: () => ({
      type: 'object',
      properties: EXPORT_PARAMS,
      'x-error-order': ['badHistoryQuery'],
    }),
    responses: {
      200: {
        description: 'The rows, streamed (chunked): CSV `ts,device_id,attr,value`, or NDJSON one record a line.',
        contentType: 'text/csv',
        schema: { type: 'string' },
        alternatives: [STREAMED_ANSWERS[1]!],
      },
      400: { description: 'A bad parameter.', errors: ['badHistoryQuery'] },
    },
    examples: [
      {
        name: 'csv',
        summary: 'One device, one day, as CSV',
        query: { devices: ['a1b2c3'], format: 'csv', dateFrom: '2026-05-01T00:00:00Z', dateTo: '2026-05-01T23:59:59Z' },
        status: 200,
        response: CSV_EXAMPLE,
      },
      {
        name: 'byTemplate',
        summary: 'The temperatures of the devices of template 1, as CSV',
        query: { template: 1, attr: ['temperature'], format: 'csv' },
        status: 200,
        response: CSV_EXAMPLE,
      },
      {
        name: 'ndjson',
        summary: 'The temperatures of one device, as NDJSON (the default format)',
        query: { devices: ['a1b2c3'], attr: ['temperature'] },
        status: 200,
        contentType: 'application/x-ndjson',
        response: NDJSON_EXAMPLE,
      },
      {
        name: 'badFormat',
        summary: 'An unknown format',
        query: { format: 'xml' },
        status: 400,
        response: err('badHistoryQuery', 'format must be csv or ndjson, got "xml"'),
      },
    ],
    handler(req, { pool }) {
      const unknown = unknownParameter(new URLSearchParams(req.queryString).keys(), EXPORT_PARAM_NAMES);
      if (unknown !== undefined)
        throw errors.badHistoryQuery(
          `unknown query parameter "${unknown}" (GET /history/export takes ${[...EXPORT_PARAM_NAMES].join(', ')})`,
        );
      const v = req.values;
      // A blank list is an absent one (every device, every label), as a blank bound is no bound.
      const split = (xs: unknown) => {
        const list = [...new Set(((xs ?? []) as string[]).flatMap((x) => x.split(',').map((s) => s.trim())).filter((s) => s !== ''))];
        return list.length > 0 ? list : undefined;
      };
      const q = historyQueryOf(v, 1);
      const format: ExportFormat = (v.format as ExportFormat | undefined) ?? exportFormatOf(req.accept) ?? 'ndjson';
      const query = {
        tenant: req.tenant,
        devices: split(v.devices),
        template: v.template as number | undefined,
        attrs: split(v.attr),
        from: q.from,
        to: q.to,
        ordered: false,
      };
      return exportReply(format, (out) => streamExport(pool, query, format, out));
    },
  },
];
