// Unit tests of the per-tenant cache behind the device views and list counts.
import { describe, expect, it } from 'vitest';
import { TenantCache } from '../../src/registry/tenant-cache.js';

describe('TenantCache', () => {
  it('keeps values per tenant', () => {
    const c = new TenantCache<string>(10);
    c.set('a', 'k', 'A', c.stamp('a'));
    c.set('b', 'k', 'B', c.stamp('b'));
    expect(c.get('a', 'k')).toBe('A');
    expect(c.get('b', 'k')).toBe('B');
    expect(c.get('c', 'k')).toBeUndefined();
  });

  it('a value read before an invalidation of its tenant is not kept', () => {
    const c = new TenantCache<string>(10);
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
    const c = new TenantCache<string>(10);
    const stamp = c.stamp('a');
    c.dropTenant('*');
    c.set('a', 'k', 'stale', stamp);
    expect(c.get('a', 'k')).toBeUndefined();
  });

  it('deleteWhere drops the matching entries of one tenant', () => {
    const c = new TenantCache<{ t: number[] }>(10);
    c.set('a', '1', { t: [1, 2] }, c.stamp('a'));
    c.set('a', '2', { t: [3] }, c.stamp('a'));
    c.set('b', '1', { t: [1] }, c.stamp('b'));
    c.deleteWhere('a', (v) => v.t.includes(1));
    expect(c.get('a', '1')).toBeUndefined();
    expect(c.get('a', '2')).toEqual({ t: [3] });
    expect(c.get('b', '1')).toEqual({ t: [1] });
    expect(c.entries).toBe(2);
  });

  it('stays within its size, dropping the oldest entries first', () => {
    const c = new TenantCache<number>(3);
    for (let i = 0; i < 5; i++) c.set('a', String(i), i, c.stamp('a'));
    expect(c.entries).toBe(3);
    expect(c.get('a', '0')).toBeUndefined();
    expect(c.get('a', '4')).toBe(4);
    const off = new TenantCache<number>(0);
    off.set('a', 'k', 1, off.stamp('a'));
    expect(off.get('a', 'k')).toBeUndefined();
  });
});
