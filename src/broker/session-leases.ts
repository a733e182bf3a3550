// Which instance owns which broker sessions, leased in PostgreSQL (sql/030_broker_sessions.sql).
// An instance's subscriber sessions are persistent: the broker keeps them, and goes on routing
// their share of the traffic to them, whether the instance runs or not. So client ids must never
// be used by two running instances at once (they would take the sessions from each other in a
// loop), and the sessions of an instance that is gone for good must be emptied and ended by one
// that runs, or what was routed to them is lost when they expire.
//
// Each instance leases one slot of its MQTT_CLIENT_ID (`base`): slot 0 has the prefix `base`
// (the client ids of a single instance are those of the versions before leases), slot k the
// prefix `base.k`. It starts on the lowest slot whose lease ran out (resuming its sessions and
// what they queued meanwhile) or that is free, and renews the lease while it runs. A slot whose
// lease ran out and that no starting instance took is drained by a running instance of the same
// share group (session-drain.ts), under a lease of its own. Lease times are the database's
// clock; an instance counts its own lease as held only until the time it asked for the renewal
// plus the lease, less a margin, so that it stops using the client ids before anyone else may
// start.
import os from 'node:os';
import type pg from 'pg';
import { inTransaction } from '../db/pool.js';

/** The prefix of a slot's client ids. */
const slotPrefix = (base: string, slot: number): string => (slot === 0 ? base : `${base}.${slot}`);

export interface LeaseOptions {
  /** MQTT_CLIENT_ID. */
  base: string;
  shareGroup: string;
  connections: number;
  leaseSeconds: number;
  /** This process (random per process: a restarted router thread finds its own slot again). */
  owner: string;
}

export interface SlotClaim {
  prefix: string;
  /** What the slot's previous holder left behind, if it had the slot before. */
  previous: { connections: number; shareGroup: string } | undefined;
}

export interface LapsedSlot {
  prefix: string;
  connections: number;
}

/** Serialises slot claims (pg_advisory_xact_lock). */
const CLAIM_LOCK = 7_341_002_118;
const MAX_SLOTS = 10_000;
/** A lease is counted as held until this long before it runs out. */
const MARGIN_MS = 1000;

interface SlotRow {
  slot: number;
  share_group: string;
  connections: number;
  owner: string;
  draining: boolean;
  lapsed: boolean;
}

export class SessionLeases {
  /** performance.now() until which each lease of ours is surely still ours. */
  private readonly heldUntil = new Map<string, number>();
  private readonly holder = `${os.hostname()}/${process.pid}`;

  constructor(
    private readonly pool: pg.Pool,
    private readonly opts: LeaseOptions,
  ) {}

  /** Whether the lease of `prefix` is ours now (by our own clock, with the margin). */
  holds(prefix: string): boolean {
    return (this.heldUntil.get(prefix) ?? 0) > performance.now();
  }

  /** Leases the lowest slot of `base` that is free, ran out, or is this process's already. */
  async claim(): Promise<SlotClaim> {
    const { base, shareGroup, connections, owner } = this.opts;
    const asked = performance.now();
    const claim = await inTransaction(this.pool, async (c) => {
      await c.query('SELECT pg_advisory_xact_lock($1)', [CLAIM_LOCK]);
      const { rows } = await c.query<SlotRow>(
        'SELECT slot, share_group, connections, owner::text, draining, lease_until < now() AS lapsed FROM broker_sessions WHERE base = $1',
        [base],
      );
      const bySlot = new Map(rows.map((r) => [r.slot, r]));
      for (let slot = 0; slot < MAX_SLOTS; slot++) {
        const row = bySlot.get(slot);
        if (row && !row.lapsed && !(row.owner === owner && !row.draining)) continue;
        const prefix = slotPrefix(base, slot);
        // A prefix taken by another base (`base.1` as an MQTT_CLIENT_ID of its own) is skipped.
        const { rowCount } = await c.query(
          `INSERT INTO broker_sessions AS s (prefix, base, slot, share_group, connections, owner, holder, lease_until)
           VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))
           ON CONFLICT (prefix) DO UPDATE SET share_group = EXCLUDED.share_group, connections = EXCLUDED.connections,
             owner = EXCLUDED.owner, holder = EXCLUDED.holder, draining = false, lease_until = EXCLUDED.lease_until
           WHERE s.base = EXCLUDED.base`,
          [prefix, base, slot, shareGroup, connections, owner, this.holder, this.opts.leaseSeconds],
        );
        if (rowCount === 1) return { prefix, previous: row ? { connections: row.connections, shareGroup: row.share_group } : undefined };
      }
      throw new Error(`no free broker session slot of MQTT_CLIENT_ID ${base} among ${MAX_SLOTS}`);
    });
    this.heldUntil.set(claim.prefix, asked + this.opts.leaseSeconds * 1000 - MARGIN_MS);
    return claim;
  }

  /** Renews our leases of `prefixes`; returns those that are ours no more (another instance took them). */
  async renew(prefixes: string[]): Promise<string[]> {
    const asked = performance.now();
    const { rows } = await this.pool.query<{ prefix: string }>(
      'UPDATE broker_sessions SET lease_until = now() + make_interval(secs => $3) WHERE prefix = ANY($1) AND owner = $2 RETURNING prefix',
      [prefixes, this.opts.owner, this.opts.leaseSeconds],
    );
    const kept = new Set(rows.map((r) => r.prefix));
    for (const p of prefixes) {
      if (kept.has(p)) this.heldUntil.set(p, asked + this.opts.leaseSeconds * 1000 - MARGIN_MS);
      else this.heldUntil.delete(p);
    }
    return prefixes.filter((p) => !kept.has(p));
  }

  /** Leases, for draining, one slot of our share group whose lease ran out (or whose drain we had begun); `own` excepted. */
  async claimLapsed(own: string): Promise<LapsedSlot | undefined> {
    const asked = performance.now();
    const { rows } = await this.pool.query<LapsedSlot>(
      `UPDATE broker_sessions SET owner = $1, holder = $2, draining = true, lease_until = now() + make_interval(secs => $5)
        WHERE prefix = (SELECT prefix FROM broker_sessions
                         WHERE share_group = $3 AND prefix <> $4 AND (lease_until < now() OR (owner = $1 AND draining))
                         ORDER BY lease_until LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING prefix, connections`,
      [this.opts.owner, this.holder, this.opts.shareGroup, own, this.opts.leaseSeconds],
    );
    const slot = rows[0];
    if (slot) this.heldUntil.set(slot.prefix, asked + this.opts.leaseSeconds * 1000 - MARGIN_MS);
    return slot;
  }

  /** Whether another instance of our share group runs (holds a lease of its own slot). */
  async othersAlive(): Promise<boolean> {
    const { rows } = await this.pool.query<{ alive: boolean }>(
      'SELECT EXISTS (SELECT 1 FROM broker_sessions WHERE share_group = $1 AND owner <> $2 AND NOT draining AND lease_until > now()) AS alive',
      [this.opts.shareGroup, this.opts.owner],
    );
    return rows[0]!.alive;
  }

  /** Gives the lease up, the sessions kept: the next instance to start resumes them, or a running one drains them. */
  async release(prefix: string): Promise<void> {
    this.heldUntil.delete(prefix);
    await this.pool.query('UPDATE broker_sessions SET lease_until = now(), draining = false WHERE prefix = $1 AND owner = $2', [
      prefix,
      this.opts.owner,
    ]);
  }

  /** The slot's sessions are ended: the slot is free. */
  async forget(prefix: string): Promise<void> {
    this.heldUntil.delete(prefix);
    await this.pool.query('DELETE FROM broker_sessions WHERE prefix = $1 AND owner = $2', [prefix, this.opts.owner]);
  }
}
