// Shard assignment: every message of one device goes to the same shard, so one actor handles
// a device's messages in order. FNV-1a (32 bit) over the device key: cheap, stable across
// processes and restarts, and even enough for hex device ids.

function hashKey(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** The shard of a device key among `shards` shards. */
export function shardFor(key: string, shards: number): number {
  return hashKey(key) % shards;
}
