// One message of a known device turned into COPY rows: escaping, translators, message-level drops.
import { describe, expect, it } from 'vitest';
import { buildDeviceModel, copyEscape, parseTranslator, renderMessage, SchemaPool, type AttrRow } from '../../src/ingest/device-model.js';
import { seriesKey } from '../../src/history/series.js';
import { microsToText } from '../../src/time.js';

describe('device model and rendering', () => {
  const row = (label: string, type: string, value_type = 'float', static_value: string | null = null, id = 1): AttrRow => ({
    template_id: 1,
    attr_id: id,
    label,
    type,
    value_type,
    static_value,
  });
  const ts = (us: number) => microsToText(us);

  it('renders COPY rows for dynamic and actuator attributes, escaping text', () => {
    const model = buildDeviceModel('t\\1', 'd1', [
      row('a', 'dynamic', 'string'),
      row('b', 'actuator', 'integer'),
      row('s', 'static', 'string', 'x'),
    ]);
    const out: string[] = [];
    const o = renderMessage(model, JSON.stringify({ a: 'x\\y\nz', b: 2, s: 'no', zz: 1 }), 1_000_000, ts, out);
    expect(out).toEqual([
      `t\\\\1\td1\ta\t${seriesKey('t\\1', 'd1', 'a')}\t1970-01-01T00:00:01.000000Z\t"x\\\\\\\\y\\\\nz"\n`,
      `t\\\\1\td1\tb\t${seriesKey('t\\1', 'd1', 'b')}\t1970-01-01T00:00:01.000000Z\t2\n`,
    ]);
    expect(o).toMatchObject({ values: 4, unknownKeys: 2, wrongTypes: 0 });
    expect(copyEscape('a\tb\r')).toBe('a\\tb\\r');
  });

  it('translators: one RFC 6902 operation each, optional ones may fail, bad ones are ignored', () => {
    expect(parseTranslator('{"op":"move","from":"/a","path":"/b","optional":true}')).toEqual({
      op: { op: 'move', from: '/a', path: '/b' },
      optional: true,
    });
    expect(parseTranslator('not json')).toMatch(/not JSON/);
    expect(parseTranslator('{"op":"explode","path":"/a"}')).toMatch(/not a JSON Patch operation/);
    expect(parseTranslator('{"op":"add","path":"/__proto__/x","value":1}')).toMatch(/__proto__/);
    expect(parseTranslator('{"op":"move","from":"/constructor/prototype","path":"/a"}')).toMatch(/prototype/);
    expect(parseTranslator('{"op":"move","from":"/prototype","path":"/a"}')).toEqual({
      op: { op: 'move', from: '/prototype', path: '/a' },
      optional: false,
    });
    const warnings: string[] = [];
    const model = buildDeviceModel(
      't',
      'd',
      [
        row('tag_a', 'dynamic'),
        row('t1', 'meta-translator', 'string', '{"op":"move","from":"/a","path":"/tag_a"}'),
        row('t2', 'meta-translator', 'string', 'broken'),
      ],
      (label) => warnings.push(label),
    );
    expect(warnings).toEqual(['t2']);
    const out: string[] = [];
    expect(renderMessage(model, '{"a":1}', 0, ts, out).dropped).toBeUndefined();
    expect(out).toHaveLength(1);
    expect(renderMessage(model, '{"b":1}', 0, ts, []).dropped).toBe('translation_failed');
    expect(renderMessage(model, '{"__proto__":{"x":1},"a":1}', 0, ts, []).dropped).toBeUndefined();
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  it("a translator's value is the template's: no message or device changes it for the next", () => {
    const rows = [
      row('meta', 'dynamic', 'object', null, 1),
      row('tags', 'dynamic', 'list', null, 2),
      row('t1', 'meta-translator', 'string', '{"op":"add","path":"/meta","value":{}}', 3),
      row('t2', 'meta-translator', 'string', '{"op":"move","from":"/temperature","path":"/meta/t","optional":true}', 4),
      row('t3', 'meta-translator', 'string', '{"op":"add","path":"/tags","value":[]}', 5),
      row('t4', 'meta-translator', 'string', '{"op":"add","path":"/tags/-","value":"fw2"}', 6),
    ];
    const pool = new SchemaPool();
    const a = buildDeviceModel('t', 'devA', rows, undefined, pool);
    const b = buildDeviceModel('t', 'devB', rows, undefined, pool);
    const stored = (model: typeof a, payload: string) => {
      const out: string[] = [];
      renderMessage(model, payload, 1_000_000, ts, out);
      return out.map((line) => line.split('\t').slice(2, 3).concat(line.trimEnd().split('\t').slice(-1)).join('='));
    };
    expect(stored(a, '{"temperature": 21.5}')).toEqual(['meta={"t":21.5}', 'tags=["fw2"]']);
    expect(stored(a, '{"humidity": 40}')).toEqual(['meta={}', 'tags=["fw2"]']);
    expect(stored(b, '{"humidity": 1}')).toEqual(['meta={}', 'tags=["fw2"]']);
  });

  it('message-level drops; an unreadable timestamp is not one (receive time)', () => {
    const model = buildDeviceModel('t', 'd', [row('a', 'dynamic')]);
    expect(renderMessage(model, '{', 0, ts, []).dropped).toBe('not_json');
    expect(renderMessage(model, '[1]', 0, ts, []).dropped).toBe('not_object');
    const rows: string[] = [];
    const o = renderMessage(model, '{"a":1,"timestamp":"soon"}', 7_000_000, ts, rows);
    expect([o.dropped, o.badTimestamp, o.us]).toEqual([undefined, true, 7_000_000]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toContain('\t1970-01-01T00:00:07.000000Z\t');
  });
});
