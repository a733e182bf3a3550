// The history query's parameters, as the route gets them checked by its query schema,
// turned into the query: modes, limits, bounds.
import { describe, expect, it } from 'vitest';
import { historyQueryOf } from '../../src/history/query.js';
import { queryChecks } from '../../src/http/route.js';
import { historyRoutes } from '../../src/history/routes.js';

describe('history query parsing', () => {
  // As the route gets it: checked and typed by its query schema, then turned into the query.
  const check = queryChecks(historyRoutes, {
    maxPageSize: 1000,
    maxDeviceCount: 10000,
    historyMaxResults: 100,
    historyMaxBuckets: 1000,
  }).get('GET /history/device/{id}/history')!;
  const q = (s: string) => historyQueryOf(check.run(new URLSearchParams(s)).values, 100);
  it('modes and limits', () => {
    expect(q('attr=a')).toMatchObject({ attrs: ['a'], single: true, order: 'desc', limit: 100 });
    expect(q('attr=a,b&attr=c&attr=a')).toMatchObject({ attrs: ['a', 'b', 'c'], single: false });
    expect(q('')).toMatchObject({ attrs: undefined, single: false });
    expect(q('lastN=5&firstN=2')).toMatchObject({ order: 'asc', limit: 2 });
    expect(q('lastN=0')).toMatchObject({ order: 'desc', limit: 100 });
    expect(q('dateFrom=2024-05-01T00:00:00Z').from).toBe('2024-05-01T00:00:00.000000Z');
  });
});
