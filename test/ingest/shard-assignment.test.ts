// Which shard a device's messages go to, and which worker owns a shard (the pinning load balancer).
import { describe, expect, it } from 'vitest';
import { queueOptionsSymbol } from 'piscina';
import { shardFor } from '../../src/ingest/shard.js';
import { pinnedBalancer } from '../../src/ingest/shard-pool.js';

describe('sharding', () => {
  it('is stable and spreads devices over the shards', () => {
    expect(shardFor('t/abc123', 4)).toBe(shardFor('t/abc123', 4));
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 10_000; i++) counts[shardFor(`tenant/${i.toString(16).padStart(6, '0')}`, 4)]!++;
    for (const c of counts) expect(c).toBeGreaterThan(2000);
  });
});

describe('the pinning load balancer', () => {
  const worker = (id: number, destroyed = false) => ({
    id,
    destroyed,
    terminating: false,
    currentUsage: 0,
    isRunningAbortableTask: false,
    histogram: null,
  });
  const task = (shard: number) =>
    ({ [queueOptionsSymbol]: { shard }, taskId: 0, filename: '', name: '', created: 0, isAbortable: false }) as never;

  it('gives every shard one owner, spread evenly, and keeps it whatever the load', () => {
    const owners = new Map<number, number>();
    const balance = pinnedBalancer(owners);
    const workers = [worker(7), worker(3)] as never[];
    const picked = [0, 1, 2, 3].map((s) => (balance(task(s), workers) as { id: number }).id);
    expect(new Set(picked).size).toBe(2);
    expect(picked.filter((id) => id === 3)).toHaveLength(2);
    for (let round = 0; round < 3; round++) {
      expect([0, 1, 2, 3].map((s) => (balance(task(s), workers) as { id: number }).id)).toEqual(picked);
    }
  });

  it('waits (null) while the owner is not offered, and reassigns once the owner is gone', () => {
    const owners = new Map<number, number>([[0, 5]]);
    const balance = pinnedBalancer(owners);
    expect(balance(task(0), [worker(6)] as never[])).toBeNull();
    owners.delete(0); // what the pool does when worker 5 is destroyed
    expect((balance(task(0), [worker(6)] as never[]) as { id: number }).id).toBe(6);
  });
});
