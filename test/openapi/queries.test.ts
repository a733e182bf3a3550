// Unit tests of the routes' query schemas (declared with each route; shared parameters in
// src/schemas/queries.ts) and their check (src/schemas/validator.ts): conversion of text values,
// defaults, and the contract's errors in the contract's order.
import { describe, expect, it } from 'vitest';
import { apiRoutes } from '../../src/api.js';
import { queryChecks } from '../../src/http/route.js';
import type { QueryResult } from '../../src/schemas/validator.js';
import type { ErrorBody } from '../helpers/api.js';

const checks = queryChecks(apiRoutes, { maxPageSize: 1000, maxDeviceCount: 10000, historyMaxResults: 10000, historyMaxBuckets: 1000 });
const run = (id: Parameters<typeof checks.get>[0], qs: string): QueryResult => checks.get(id)!.run(new URLSearchParams(qs));
const failure = (id: Parameters<typeof checks.get>[0], qs: string) => {
  const f = run(id, qs).failure;
  return f ? f.error.body : undefined;
};
const plain = (message: string) => ({ message, status: 400 });

describe('conversion', () => {
  it('defaults fill in; unknown parameters are not read', () => {
    expect(run('GET /device', 'other=1').values).toEqual({
      page_num: 1,
      page_size: 20,
      idsOnly: false,
      attr: [],
      attr_type: [],
      lastValues: false,
    });
  });

  it('integers: digits with an optional sign, blanks around allowed', () => {
    expect(run('GET /template', 'page_num=%202%20&page_size=+5').values).toMatchObject({ page_num: 2, page_size: 5 });
    for (const bad of ['1.5', '1e3', '0x10', '', 'abc', '1 2']) {
      expect(failure('GET /template', `page_num=${encodeURIComponent(bad)}`), bad).toEqual(
        plain('page_size and page_num must be integers'),
      );
    }
  });

  it('flags: true, 1 (any case) or bare are true; anything else false, never an error', () => {
    for (const [qs, v] of [
      ['idsOnly', true],
      ['idsOnly=TRUE', true],
      ['idsOnly=1', true],
      ['idsOnly=yes', false],
      ['idsOnly=false', false],
    ] as const) {
      expect(run('GET /device', qs).values.idsOnly, qs).toBe(v);
    }
  });

  it('repeated parameters are arrays; others take the first value', () => {
    expect(run('GET /template', 'attr=a=1&attr=b=2&attr_type=x&attr_type=y&label=p&label=q').values).toMatchObject({
      attr: ['a=1', 'b=2'],
      attr_type: ['x', 'y'],
      label: 'p',
    });
  });

  it('lenient enums: an unknown value is the default', () => {
    expect(run('GET /template/{id}', 'attr_format=weird').values).toEqual({ attr_format: 'both' });
    expect(run('GET /template/{id}', 'attr_format=split').values).toEqual({ attr_format: 'split' });
    expect(run('GET /device', 'sortBy=id').values.sortBy).toBeUndefined();
    expect(run('GET /device', 'sortBy=label').values.sortBy).toBe('label');
  });

  it('idsOnly: page_num and page_size are not read', () => {
    expect(run('GET /device', 'idsOnly&page_size=abc&page_num=0').failure).toBeUndefined();
    expect(failure('GET /device', 'idsOnly=false&page_size=abc')).toEqual(plain('page_size and page_num must be integers'));
  });
});

describe("the contract's errors, in its order", () => {
  it.each([
    ['page_num=0&page_size=x', 'page_size and page_num must be integers'],
    ['page_num=-3&page_size=0', 'Page numbers must be greater than 1'],
    ['page_size=0&attr=nope', 'At least one entry per page is mandatory'],
    ['page_size=1001', 'page_size must be at most 1000'],
    ['attr=ok=1&attr=nope', 'attr filter "nope" must have the form <label>=<value>'],
  ])('list: %s', (qs, message) => {
    expect(failure('GET /device', qs)).toEqual(plain(message));
  });

  it('attr and attr_type: at most 16 of each, after the page checks', () => {
    const many = (name: string, n: number, value: (i: number) => string) =>
      Array.from({ length: n }, (_, i) => `${name}=${value(i)}`).join('&');
    for (const id of ['GET /device', 'GET /template'] as const) {
      expect(run(id, `${many('attr', 16, (i) => `l${i}=v`)}&${many('attr_type', 16, (i) => `t${i}`)}`).failure, id).toBeUndefined();
      expect(
        failure(
          id,
          many('attr', 17, (i) => `l${i}=v`),
        ),
      ).toEqual(plain('At most 16 attr filters are allowed in one request'));
      expect(
        failure(
          id,
          many('attr_type', 17, (i) => `t${i}`),
        ),
      ).toEqual(plain('At most 16 attr_type filters are allowed in one request'));
      // A filter given more than once counts once (found by an audit: 17 copies of one filter were 400).
      expect(run(id, `${many('attr', 17, () => 'l=v')}&${many('attr_type', 30, () => 't')}`).failure, id).toBeUndefined();
      expect(run(id, `${many('attr', 16, (i) => `l${i}=v`)}&attr=l0=v`).failure, id).toBeUndefined();
      expect(failure(id, `page_size=0&${many('attr_type', 17, (i) => `t${i}`)}`)).toEqual(
        plain('At least one entry per page is mandatory'),
      );
    }
    expect(
      failure(
        'GET /internal/device',
        many('attr', 17, (i) => `l${i}=v`),
      ),
    ).toEqual(plain('At most 16 attr filters are allowed in one request'));
  });

  it('POST /device: count, then its maximum', () => {
    expect(failure('POST /device', 'count=0')).toEqual(plain('If provided, count must be integer'));
    expect(failure('POST /device', 'count=')).toEqual(plain('If provided, count must be integer'));
    expect(failure('POST /device', 'count=10001')).toEqual(plain('count must be at most 10000'));
    expect(run('POST /device', 'count=3&verbose').values).toEqual({ count: 3, verbose: true });
  });

  it('gen_psk: a missing key_length is told apart (keyword required) from a bad one', () => {
    expect(run('POST /device/gen_psk/{id}', 'attrs=a').failure).toMatchObject({
      param: 'key_length',
      keyword: 'required',
      error: { body: plain('Missing key_length parameter') },
    });
    expect(run('POST /device/gen_psk/{id}', 'key_length=1024').failure).toMatchObject({
      keyword: 'maximum',
      error: { body: plain('key_length must be greater than 0 and lesser than 1024') },
    });
    expect(run('POST /device/gen_psk/{id}', 'key_length=').failure).toMatchObject({ keyword: 'type' });
    expect(run('POST /device/gen_psk/{id}', 'key_length=16').values).toEqual({ key_length: 16 });
  });

  it('copy: both source parameters, not empty', () => {
    for (const qs of ['', 'from_dev_id=a', 'from_attr_label=b', 'from_dev_id=&from_attr_label=b']) {
      expect(failure('PUT /device/{id}/attrs/{label}/psk', qs), qs).toEqual(
        plain('Missing mandatory parameter: from_dev_id or/and from_attr_label'),
      );
    }
    expect(run('PUT /device/{id}/attrs/{label}/psk', 'from_dev_id=a&from_attr_label=b').failure).toBeUndefined();
  });
});

describe('GET /history: its query schema', () => {
  const history = queryChecks(apiRoutes, { maxPageSize: 1000, maxDeviceCount: 10000, historyMaxResults: 50, historyMaxBuckets: 1000 }).get(
    'GET /history/device/{id}/history',
  )!;
  const values = (qs: string) => history.run(new URLSearchParams(qs)).values;
  const bad = (qs: string) => history.run(new URLSearchParams(qs)).failure?.error.body as ErrorBody | undefined;

  it('types the values: counts as integers, bounds as text, every attr value; nothing is defaulted', () => {
    expect(values('lastN=%205%20&firstN=0&dateFrom=2024-05-01T12:00:00Z&dateTo=1714564800000&attr=a,b&attr=c')).toEqual({
      lastN: 5,
      firstN: 0,
      dateFrom: '2024-05-01T12:00:00Z',
      dateTo: '1714564800000',
      attr: ['a,b', 'c'],
    });
    expect(values('')).toEqual({});
  });

  it.each([
    ['lastN=abc', 'lastN must be a non-negative integer, got "abc"'],
    ['lastN=', 'lastN must be a non-negative integer, got ""'],
    ['lastN=-1', 'lastN must be a non-negative integer, got "-1"'],
    ['lastN=%20-1', 'lastN must be a non-negative integer, got " -1"'],
    ['firstN=1.5', 'firstN must be a non-negative integer, got "1.5"'],
    ['lastN=51', 'lastN must be at most 50, got 51'],
    ['firstN=%20051', 'firstN must be at most 50, got 51'],
    ['dateFrom=yesterday', 'dateFrom must be an ISO 8601 date and time (e.g. 2024-05-01T12:00:00Z), got "yesterday"'],
    ['dateTo=2024-13-01', 'dateTo must be an ISO 8601 date and time (e.g. 2024-05-01T12:00:00Z), got "2024-13-01"'],
    ['dateTo=2024-02-30T00:00:00Z', 'dateTo must be an ISO 8601 date and time (e.g. 2024-05-01T12:00:00Z), got "2024-02-30T00:00:00Z"'],
  ])('%s: 400 with the message naming the operator and the value as sent', (qs, message) => {
    expect(bad(qs)).toEqual(plain(message));
  });

  it('several bad operators: the first of lastN, firstN, dateFrom, dateTo', () => {
    expect(bad('dateTo=x&dateFrom=y&firstN=z&lastN=w')).toEqual(plain('lastN must be a non-negative integer, got "w"'));
    expect(bad('dateTo=x&dateFrom=y&firstN=51')).toEqual(plain('firstN must be at most 50, got 51'));
    expect(bad('dateTo=x&dateFrom=y')?.message).toMatch(/^dateFrom /);
  });

  it('repeated operators: the first value counts', () => {
    expect(values('lastN=5&lastN=abc').lastN).toBe(5);
    expect(bad('lastN=abc&lastN=5')).toEqual(plain('lastN must be a non-negative integer, got "abc"'));
  });

  it('a blank bound is no bound; an explicit sign is an integer like every integer parameter', () => {
    expect(history.run(new URLSearchParams('dateFrom=&dateTo=%20')).failure).toBeUndefined();
    expect(values('lastN=%2B5').lastN).toBe(5);
  });
});
