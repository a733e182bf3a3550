import { describe, expect, it } from 'vitest';
import type { AttrView, TemplateCreated } from '../helpers/api.js';
import { countOf } from '../helpers/db.js';
import { createTemplate } from '../helpers/registry-api.js';
import { http, useService } from '../helpers/service.js';
import { sensorBody, TS } from './fixtures.js';

const svc = useService();

const post = (body: unknown) => http<TemplateCreated>('POST', `${svc.base}/template`, { token: svc.token, body });
const count = () => countOf(svc.service.pool, 'SELECT count(*)::int AS n FROM templates');

describe('POST /template', () => {
  it('creates a template: {result, template} with an integer id, attributes split by type', async () => {
    const res = await post(sensorBody());
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['result', 'template']);
    expect(res.body.result).toBe('ok');
    const t = res.body.template;
    expect(typeof t.id).toBe('number');
    expect(t.label).toBe('SensorModel');
    expect(t.created).toMatch(TS);
    expect(t).not.toHaveProperty('updated');
    expect(t.attrs.map((a) => a.label)).toEqual(['temperature', 'model', 'led', 'protocol']);
    expect(t.data_attrs.map((a) => a.label)).toEqual(['temperature', 'model', 'led']);
    expect(t.config_attrs.map((a) => a.label)).toEqual(['protocol']);
    const [temp, model, , protocol] = t.attrs as [AttrView, AttrView, AttrView, AttrView];
    // ids ascending in input order; template_id a string; static_value only when set
    expect(t.attrs.map((a) => a.id)).toEqual([...t.attrs.map((a) => a.id)].sort((a: number, b: number) => a - b));
    expect(temp).toEqual({
      id: temp.id,
      label: 'temperature',
      type: 'dynamic',
      value_type: 'float',
      template_id: String(t.id),
      created: temp.created,
    });
    expect(temp.created).toMatch(TS);
    expect(model.static_value).toBe('T-1000');
    expect(model).not.toHaveProperty('metadata');
    expect(protocol.metadata).toEqual([
      {
        id: protocol.metadata![0]!.id,
        label: 'unit',
        type: 'static',
        value_type: 'string',
        static_value: 'none',
        created: protocol.metadata![0]!.created,
      },
    ]);
    expect(protocol.metadata![0]!.id).not.toBe(protocol.id);
  });

  it('the response equals what GET returns afterwards', async () => {
    const t = await createTemplate(svc.base, svc.token, sensorBody());
    const got = await http('GET', `${svc.base}/template/${t.id}`, { token: svc.token });
    expect(got.status).toBe(200);
    expect(got.body).toEqual(t);
  });

  it('without attrs: a template with no attributes', async () => {
    const res = await post({ label: 'empty' });
    expect(res.status).toBe(200);
    expect(res.body.template).toMatchObject({ label: 'empty', attrs: [], data_attrs: [], config_attrs: [] });
  });

  it('stores scalar static values as text; a static psk attribute needs no value', async () => {
    const res = await post({
      label: 'scalars',
      attrs: [
        { label: 'n', type: 'static', value_type: 'integer', static_value: 42 },
        { label: 'b', type: 'static', value_type: 'bool', static_value: true },
        { label: 'key', type: 'static', value_type: 'psk' },
        { label: 'odd', type: 'some-type', value_type: 'some-value-type' },
      ],
    });
    expect(res.status).toBe(200);
    const [n, b, key, odd] = res.body.template.attrs as [AttrView, AttrView, AttrView, AttrView];
    expect(n.static_value).toBe('42');
    expect(b.static_value).toBe('true');
    expect(key).not.toHaveProperty('static_value');
    expect(odd).toMatchObject({ type: 'some-type', value_type: 'some-value-type' });
    expect(res.body.template.config_attrs.map((a) => a.label)).toEqual(['odd']);
  });

  it('accepts labels of 128 characters and the whole label alphabet', async () => {
    const res = await post({
      label: 'x'.repeat(128),
      attrs: [{ label: 'Ab_9-' + 'z'.repeat(123), type: 'dynamic', value_type: 'x'.repeat(32) }],
    });
    expect(res.status).toBe(200);
  });
});

describe('POST /template: bad input changes nothing', () => {
  const cases: Array<[string, unknown, number, unknown]> = [
    ['label missing', { attrs: [] }, 400, { message: 'failed to parse input', errors: { label: ['Missing data for required field.'] } }],
    ['label not a string', { label: 5 }, 400, { message: 'failed to parse input', errors: { label: ['Not a valid string.'] } }],
    [
      'label too long',
      { label: 'x'.repeat(129) },
      400,
      { message: 'failed to parse input', errors: { label: ['Longer than maximum length 128.'] } },
    ],
    ['attrs not a list', { label: 'a', attrs: {} }, 400, { message: 'failed to parse input', errors: { attrs: ['Not a valid list.'] } }],
    ['attrs null', { label: 'a', attrs: null }, 400, { message: 'failed to parse input', errors: { attrs: ['Field may not be null.'] } }],
    ['label null', { label: null }, 400, { message: 'failed to parse input', errors: { label: ['Field may not be null.'] } }],
    [
      'an attribute not an object',
      { label: 'a', attrs: ['x'] },
      400,
      { message: 'failed to parse attr', errors: { _schema: ['Invalid input type.'] } },
    ],
    [
      'an attribute that is null',
      { label: 'a', attrs: [{ label: 'ok', type: 'dynamic', value_type: 'float' }, null] },
      400,
      { message: 'failed to parse attr', errors: { _schema: ['Invalid input type.'] } },
    ],
    ['body not an object', [1, 2], 400, { message: 'failed to parse input', errors: { _schema: ['Invalid input type.'] } }],
    [
      'attribute label missing',
      { label: 'a', attrs: [{ type: 'dynamic', value_type: 'float' }] },
      400,
      { message: 'failed to parse attr', errors: { label: ['Missing data for required field.'] } },
    ],
    [
      'attribute type and value_type missing',
      { label: 'a', attrs: [{ label: 'x' }] },
      400,
      {
        message: 'failed to parse attr',
        errors: { type: ['Missing data for required field.'], value_type: ['Missing data for required field.'] },
      },
    ],
    [
      'attribute label with a space',
      { label: 'a', attrs: [{ label: 'bad label', type: 'dynamic', value_type: 'float' }] },
      400,
      { message: 'failed to parse attr', errors: { label: ['Labels must contain letters, numbers or dashes(-_)'] } },
    ],
    [
      'attribute label too long',
      { label: 'a', attrs: [{ label: 'x'.repeat(129), type: 'dynamic', value_type: 'float' }] },
      400,
      { message: 'failed to parse attr', errors: { label: ['Longer than maximum length 128.'] } },
    ],
    [
      'type too long',
      { label: 'a', attrs: [{ label: 'x', type: 't'.repeat(33), value_type: 'float' }] },
      400,
      { message: 'failed to parse attr', errors: { type: ['Longer than maximum length 32.'] } },
    ],
    [
      'static without static_value',
      { label: 'a', attrs: [{ label: 'x', type: 'static', value_type: 'string' }] },
      400,
      { message: 'failed to parse attr', errors: { static_value: ['Missing data for required field.'] } },
    ],
    [
      'static_value an object',
      { label: 'a', attrs: [{ label: 'x', type: 'static', value_type: 'string', static_value: { a: 1 } }] },
      400,
      { message: 'failed to parse attr', errors: { static_value: ['Not a valid string.'] } },
    ],
    [
      'static_value too long',
      { label: 'a', attrs: [{ label: 'x', type: 'static', value_type: 'string', static_value: 'v'.repeat(129) }] },
      400,
      { message: 'failed to parse attr', errors: { static_value: ['Longer than maximum length 128.'] } },
    ],
    [
      'two attributes with the same label',
      {
        label: 'a',
        attrs: [
          { label: 'x', type: 'dynamic', value_type: 'float' },
          { label: 'x', type: 'static', value_type: 'float', static_value: '1' },
        ],
      },
      400,
      { message: 'failed to parse attr', errors: { label: ['Repeated attribute label: x'] } },
    ],
    [
      'a bad metadata entry',
      {
        label: 'a',
        attrs: [{ label: 'x', type: 'dynamic', value_type: 'float', metadata: [{ label: 'u', type: 'static', value_type: 'string' }] }],
      },
      400,
      { message: 'failed to parse attr', errors: { metadata: { '0': { static_value: ['Missing data for required field.'] } } } },
    ],
  ];

  it.each(cases)('%s', async (_name, body, status, expected) => {
    const before = await count();
    const res = await post(body);
    expect(res.status).toBe(status);
    expect(res.body).toEqual(expected);
    expect(await count()).toBe(before);
  });

  it('a body that is not JSON: 400 with the contract message', async () => {
    const res = await http('POST', `${svc.base}/template`, {
      token: svc.token,
      rawBody: '{"label":',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ message: 'Payload must be valid JSON, and Content-Type set accordingly', status: 400 });
  });

  it('no token: 401', async () => {
    const res = await http('POST', `${svc.base}/template`, { body: sensorBody() });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ message: 'No authorization token has been supplied', status: 401 });
  });
});
