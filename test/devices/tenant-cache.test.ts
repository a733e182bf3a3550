// Unit tests of the per-tenant cache behind the device views and list counts.
import { describe, expect, it } from 'vitest';
import { ListCache, TenantCache } from '../../src/registry/tenant-cache.js';

const HOUR = 3_600_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('TenantCache', () => {
  it('keeps values per tenant', () => {
    const c = new TenantCache<string>(10, HOUR);
    c.set('a', 'k', 'A', c.stamp('a'));
    c.set('b', 'k', 'B', c.stamp('b'));
    expect(c.get('a', 'k')).toBe('A');
    expect(c.get('b', 'k')).toBe('B');
    expect(c.get('c', 'k')).toBeUndefined();
  });

  it('a value read before an invalidation of its tenant is not kept', () => {
    const c = new TenantCache<string>(10, HOUR);
    const stamp = c.stamp('a'); // the reader starts...
    c.delete('a', ['other']); // ...a change of the tenant is published meanwhile...
    c.set('a', 'k', 'stale', stamp); // ...the reader's value may predate it
    expect(c.get('a', 'k')).toBeUndefined();
    // another tenant's change does not matter
    const s2 = c.stamp('a');
    c.dropTenant('b');
    c.set('a', 'k', 'fresh', s2);
    expect(c.get('a', 'k')).toBe('fresh');
  });

  it('clear (tenant "*") invalidates every reader in flight', () => {
    const c = new TenantCache<string>(10, HOUR);
    const stamp = c.stamp('a');
    c.dropTenant('*');
    c.set('a', 'k', 'stale', stamp);
    expect(c.get('a', 'k')).toBeUndefined();
  });

  it('deleteWhere drops the matching entries of one tenant', () => {
    const c = new TenantCache<{ t: number[] }>(10, HOUR);
    c.set('a', '1', { t: [1, 2] }, c.stamp('a'));
    c.set('a', '2', { t: [3] }, c.stamp('a'));
    c.set('b', '1', { t: [1] }, c.stamp('b'));
    c.deleteWhere('a', (v) => v.t.includes(1));
    expect(c.get('a', '1')).toBeUndefined();
    expect(c.get('a', '2')).toEqual({ t: [3] });
    expect(c.get('b', '1')).toEqual({ t: [1] });
    expect(c.entries).toBe(2);
  });

  it('advanced(stamp, n): a value is kept only if exactly n invalidations of the tenant came in since the stamp', () => {
    const c = new TenantCache<string>(10, HOUR);
    const s0 = c.stamp('a');
    c.delete('a', ['x']); // our own change
    c.set('a', 'k', 'v', c.advanced(s0, 1));
    expect(c.get('a', 'k')).toBe('v');
    const s1 = c.stamp('a');
    c.delete('a', ['x']);
    c.delete('a', ['y']); // someone else's change as well
    c.set('a', 'k2', 'v', c.advanced(s1, 1));
    expect(c.get('a', 'k2')).toBeUndefined();
    const s2 = c.stamp('a');
    c.delete('a', ['x']);
    c.clear(); // everything dropped
    c.set('a', 'k3', 'v', c.advanced(s2, 1));
    expect(c.get('a', 'k3')).toBeUndefined();
  });

  it('stays within its size, dropping the oldest entries first', () => {
    const c = new TenantCache<number>(3, HOUR);
    for (let i = 0; i < 5; i++) c.set('a', String(i), i, c.stamp('a'));
    expect(c.entries).toBe(3);
    expect(c.get('a', '0')).toBeUndefined();
    expect(c.get('a', '4')).toBe(4);
    const off = new TenantCache<number>(0, HOUR);
    off.set('a', 'k', 1, off.stamp('a'));
    expect(off.get('a', 'k')).toBeUndefined();
  });

  it('uses no value longer than its maximum age, even without any invalidation', async () => {
    const c = new TenantCache<string>(10, 100);
    c.set('a', 'k', 'v', c.stamp('a'));
    expect(c.get('a', 'k')).toBe('v');
    await sleep(150);
    expect(c.get('a', 'k')).toBeUndefined();
    expect(c.entries).toBe(0);
    c.set('a', 'k', 'again', c.stamp('a')); // read again: young again
    expect(c.get('a', 'k')).toBe('again');
  });
});

describe('ListCache', () => {
  const page = { num: 1, size: 2, offset: 0 };
  const request = (fetched: string[][], counted: number[], extra: Partial<Parameters<ListCache['page']>[1]> = {}) => ({
    key: 'k',
    sortByLabel: false,
    page,
    fetchPage: () => Promise.resolve(fetched.shift()!),
    count: () => Promise.resolve(counted.shift()!),
    cachePage: true,
    ...extra,
  });

  it('answers a page read before from the cache until the tenant changes', async () => {
    const c = new ListCache(HOUR);
    const fetched = [
      ['a', 'b'],
      ['a', 'c'],
    ];
    const counted = [3, 4];
    expect(await c.page('t', request(fetched, counted))).toEqual({ items: ['a', 'b'], matches: 3 });
    expect(await c.page('t', request(fetched, counted))).toEqual({ items: ['a', 'b'], matches: 3 });
    expect(fetched).toHaveLength(1); // no second read
    c.dropTenant('t');
    expect(await c.page('t', request(fetched, counted))).toEqual({ items: ['a', 'c'], matches: 4 });
  });

  it('keys pages by order and position; never keeps pages of records (cachePage false)', async () => {
    const c = new ListCache(HOUR);
    await c.page('t', request([['a', 'b']], [3]));
    expect(await c.page('t', request([['b', 'a']], [], { sortByLabel: true }))).toEqual({ items: ['b', 'a'], matches: 3 });
    expect(await c.page('t', request([['c']], [], { page: { num: 2, size: 2, offset: 2 } }))).toEqual({ items: ['c'], matches: 3 });
    const records = [[{ id: 'a' }], [{ id: 'a2' }]];
    await c.page('u', { ...request([], [1]), fetchPage: () => Promise.resolve(records.shift()!), cachePage: false });
    expect(await c.page('u', { ...request([], []), fetchPage: () => Promise.resolve(records.shift()!), cachePage: false })).toEqual({
      items: [{ id: 'a2' }],
      matches: 1,
    });
  });

  it('reads a page and its count again once they are older than the maximum age', async () => {
    const c = new ListCache(100);
    const fetched = [['a'], ['b']];
    await c.page('t', request(fetched, []));
    await sleep(150);
    expect(await c.page('t', request(fetched, []))).toEqual({ items: ['b'], matches: 1 });
  });

  it('does not keep a page read while the tenant changed', async () => {
    const c = new ListCache(HOUR);
    const fetched = [['old'], ['new']];
    await c.page('t', { ...request(fetched, []), fetchPage: () => (c.dropTenant('t'), Promise.resolve(fetched.shift()!)) });
    expect(await c.page('t', request(fetched, []))).toEqual({ items: ['new'], matches: 1 });
  });
});
