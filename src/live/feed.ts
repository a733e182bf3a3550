// Committed telemetry, seen from the main thread (docs/live.md). The shard workers post each
// commit's stored messages on a BroadcastChannel once the COPY has committed (never before);
// the feed hands them to its listeners (device status, the live stream). With LIVE_FANOUT it
// also passes them to every other instance by PostgreSQL NOTIFY (one statement per commit, in
// payloads under 8000 bytes) and listens for theirs, so a client of any instance sees what any
// instance committed. The NOTIFY is sent after the commit, by this instance: an instance that
// dies between the two loses those messages for the other instances' streams (they are stored
// all the same). Nothing here ever makes ingest wait: posting to the channel is fire-and-forget,
// and a failed NOTIFY is counted and logged, not retried.
// The fan-out costs a database round trip and a JSON text per committed message, so it runs only
// while another instance listens: each instance says so on the channel when it starts listening
// (the others answer at once) and every HELLO_MS after; a single instance sends no telemetry.
// An instance that starts listening (at start, or again after a loss) has missed what the others
// learnt before: each of them writes what it holds (its peer-join hooks: device status) and then
// answers `written` to that instance alone, which reads the database again (its peer-written
// listeners). No timing is assumed: a slow instance answers late, not never. An instance that
// heard no other for PEER_TTL_MS (its own listening connection away) sent nothing meanwhile: on
// hearing each of them again it writes and answers `written` to it in the same way.
import crypto from 'node:crypto';
import { BroadcastChannel } from 'node:worker_threads';
import pg from 'pg';
import client from 'prom-client';
import { connectionLimits, SESSION_OPTIONS, type ConnectionLimits } from '../db/limits.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import { COMMITTED_CHANNEL, NOT_CARRIED, type CommittedBatch } from '../ingest/protocol.js';

const NOTIFY_CHANNEL = 'live_committed';
/** PostgreSQL refuses NOTIFY payloads of 8000 bytes or more; room is left for the envelope. */
const MAX_PAYLOAD_BYTES = 7800;
const RELISTEN_MS = 1000;
/** How often an instance tells the others that it listens. */
const HELLO_MS = 5000;
/** Committed telemetry is sent while another instance was heard from within this. */
const PEER_TTL_MS = 3 * HELLO_MS;
/** An instance not heard from for this long is taken as gone (not told what it missed). */
const PEER_FORGET_MS = 60 * 60_000;

export type CommittedListener = (batch: CommittedBatch) => void;

/** One message in a NOTIFY payload: tenant, id, ts µs, received µs, attrs JSON text. */
type Wire = [string, string, number, number, string];
/** A message passed on without its values (too large for one payload): tenant, id, ts µs, received µs. */
type Seen = [string, string, number, number];
/**
 * A payload: committed messages (`m`), messages without their values (`s`), or a hello (`h`:
 * `new` asks the others to answer `beat` at once and `written`, to instance `t` alone, once they
 * have written what they hold). Instances of an earlier version ignore `written`.
 */
type Envelope = { o: string; m?: Wire[]; s?: Seen[]; h?: 'new' | 'beat' | 'written'; t?: string };

export class LiveFeed {
  private readonly listeners = new Set<CommittedListener>();
  /** Told each time the listening connection is back after a loss (what was sent meanwhile is not replayed). */
  private readonly relistened = new Set<() => void>();
  /** Run when another instance starts listening, before this one answers `written`. */
  private readonly peerJoinHooks = new Set<() => Promise<void>>();
  /** Told when another instance answers this one's `new` with `written`. */
  private readonly peerWritten = new Set<() => void>();
  /** Whether a listening connection was ever set up (the next one is a return after a loss). */
  private listenedBefore = false;
  private readonly channel = new BroadcastChannel(COMMITTED_CHANNEL);
  private readonly origin = crypto.randomUUID().slice(0, 8);
  private sender: pg.Client | undefined;
  private senderRetryAt = 0;
  /** The sending connection's backend: its NOTIFYs are this instance's own. */
  private senderPid: number | undefined;
  private listener: pg.Client | undefined;
  private hello: NodeJS.Timeout | undefined;
  /** The listening connection's reopening, while one is scheduled (listenLater). */
  private relisten: NodeJS.Timeout | undefined;
  /** When another instance was last heard from (performance.now()). */
  private peerSeenAt = -Infinity;
  /** The other instances heard from (origin → performance.now()), those not heard for PEER_FORGET_MS left out. */
  private readonly peers = new Map<string, number>();
  /**
   * Instances that missed some of this one's commits: committed while no other instance was heard
   * (this one's listening connection down for longer than PEER_TTL_MS), so not sent, or whose
   * NOTIFY failed (the sending connection lost). Once heard
   * again, each is told `written` after this one has written what it holds, and reads it back.
   */
  private readonly missedBy = new Set<string>();
  private closed = false;
  /** NOTIFYs go one after another on the sending connection. */
  private sending: Promise<void> = Promise.resolve();
  private readonly notified: client.Counter;
  private readonly skipped: client.Counter;
  private readonly failed: client.Counter;

  constructor(private readonly opts: { databaseUrl: string; limits: ConnectionLimits; fanout: boolean; metrics: Metrics; log: Logger }) {
    const registers = [opts.metrics.registry];
    this.notified = new client.Counter({
      name: 'live_fanout_notifications_total',
      help: 'NOTIFY payloads of committed telemetry sent to the other instances',
      registers,
    });
    this.skipped = new client.Counter({
      name: 'live_fanout_skipped_messages_total',
      help: 'Committed messages too large for one NOTIFY payload: their values are not shown on the other instances (their device status is)',
      registers,
    });
    this.failed = new client.Counter({
      name: 'live_fanout_failures_total',
      help: 'NOTIFY statements of committed telemetry that failed (those messages are not shown on the other instances)',
      registers,
    });
    this.channel.unref();
  }

  async start(): Promise<void> {
    this.channel.onmessage = (m) => this.local((m as { data: CommittedBatch }).data);
    if (!this.opts.fanout) return;
    this.sender = await this.connectSender();
    await this.listen();
    this.hello = setInterval(() => {
      void this.say('beat');
      const forgetBefore = performance.now() - PEER_FORGET_MS;
      for (const [peer, at] of this.peers) if (at < forgetBefore) this.peers.delete(peer);
    }, HELLO_MS).unref();
  }

  on(listener: CommittedListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * `listener` is called whenever the listening connection is back after it was lost: other
   * instances' commits of the meantime were never heard, so what was learnt from them (device
   * status) must be read from the database again.
   */
  onRelisten(listener: () => void): () => void {
    this.relistened.add(listener);
    return () => this.relistened.delete(listener);
  }

  /**
   * `hook` runs whenever another instance starts listening (it has missed what this one learnt
   * before): it writes what the other should read back. This instance answers `written` once
   * every hook has settled.
   */
  onPeerJoin(hook: () => Promise<void>): () => void {
    this.peerJoinHooks.add(hook);
    return () => this.peerJoinHooks.delete(hook);
  }

  /** `listener` is called when another instance, after this one started listening, has written what it held. */
  onPeerWritten(listener: () => void): () => void {
    this.peerWritten.add(listener);
    return () => this.peerWritten.delete(listener);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.hello);
    clearTimeout(this.relisten);
    this.channel.close();
    for (const c of [this.sender, this.listener]) await c?.end().catch(() => undefined);
  }

  private local(batch: CommittedBatch): void {
    this.deliver(batch);
    if (!this.opts.fanout) return;
    if (performance.now() - this.peerSeenAt < PEER_TTL_MS) this.sending = this.sending.then(() => this.notify(batch));
    else for (const peer of this.peers.keys()) this.missedBy.add(peer);
  }

  /** Tells the other instances that this one listens (`to`: one of them only). */
  private say(h: 'new' | 'beat' | 'written', to?: string): Promise<boolean> {
    const envelope: Envelope = to === undefined ? { o: this.origin, h } : { o: this.origin, h, t: to };
    const sent = this.sending.then(() =>
      this.send('SELECT pg_notify($1, $2)', [NOTIFY_CHANNEL, JSON.stringify(envelope)]).then(
        () => true,
        () => false,
      ),
    );
    this.sending = sent.then(() => undefined);
    return sent;
  }

  /** A query on the sending connection, opened again (at most once a RELISTEN_MS) once lost. */
  private async send(sql: string, params: unknown[]): Promise<void> {
    if (!this.sender) {
      if (this.closed || performance.now() < this.senderRetryAt) throw new Error('no connection for the fan-out');
      this.senderRetryAt = performance.now() + RELISTEN_MS;
      this.sender = await this.connectSender();
    }
    const c = this.sender;
    try {
      await c.query(sql, params);
    } catch (err) {
      // (a timed-out statement may still hold the connection: the next send opens another)
      if (this.sender === c) {
        this.sender = undefined;
        c.end().catch(() => undefined);
      }
      throw err;
    }
  }

  private async connectSender(): Promise<pg.Client> {
    const c = await this.connect('device-registry-live-notify', true);
    // pg sets `processID` (the backend's pid) at runtime; @types/pg does not declare it.
    this.senderPid = (c as unknown as { processID: number }).processID;
    c.on('end', () => {
      if (this.sender === c) this.sender = undefined;
    });
    return c;
  }

  private deliver(batch: CommittedBatch): void {
    for (const l of this.listeners) {
      try {
        l(batch);
      } catch (err) {
        this.opts.log.error('live listener failed', { error: err as Error });
      }
    }
  }

  /**
   * The batch in payloads under the limit, sent in one statement. A message too large to pass on
   * whole goes without its values, in the envelope's `s` list (which instances older than it
   * ignore): the others learn that its device was seen.
   */
  private async notify(batch: CommittedBatch): Promise<void> {
    const whole: string[] = [];
    const seenOnly: string[] = [];
    const room = MAX_PAYLOAD_BYTES - `{"o":"${this.origin}","m":[]}`.length;
    for (let i = 0; i < batch.ids.length; i++) {
      const text = JSON.stringify([batch.tenants[i]!, batch.ids[i]!, batch.ts[i]!, batch.received[i]!, batch.attrs[i]!] satisfies Wire);
      if (Buffer.byteLength(text) < room) {
        whole.push(text);
        continue;
      }
      this.skipped.inc();
      const seen = JSON.stringify([batch.tenants[i]!, batch.ids[i]!, batch.ts[i]!, batch.received[i]!] satisfies Seen);
      if (Buffer.byteLength(seen) < room) seenOnly.push(seen);
    }
    const payloads = [...this.pack('m', whole), ...this.pack('s', seenOnly)];
    if (payloads.length === 0) return;
    try {
      await this.send('SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p', [NOTIFY_CHANNEL, payloads]);
      this.notified.inc(payloads.length);
    } catch (err) {
      this.failed.inc();
      for (const peer of this.peers.keys()) this.missedBy.add(peer); // (told to read the table once heard again)
      if (!this.closed) this.opts.log.warn('could not pass committed telemetry to the other instances', { error: (err as Error).message });
    }
  }

  /** JSON texts in envelopes of list `key`, each payload under the limit. */
  private pack(key: 'm' | 's', texts: string[]): string[] {
    const head = `{"o":"${this.origin}","${key}":[`;
    const payloads: string[] = [];
    let parts: string[] = [];
    let size = head.length + 2;
    for (const text of texts) {
      const bytes = Buffer.byteLength(text) + 1;
      if (parts.length > 0 && size + bytes > MAX_PAYLOAD_BYTES) {
        payloads.push(head + parts.join(',') + ']}');
        parts = [];
        size = head.length + 2;
      }
      parts.push(text);
      size += bytes;
    }
    if (parts.length > 0) payloads.push(head + parts.join(',') + ']}');
    return payloads;
  }

  /** A connection with the service's limits (statement timeout, keepalive; `sending`: a client-side timeout too). */
  private async connect(name: string, sending: boolean): Promise<pg.Client> {
    const c = new pg.Client({
      connectionString: this.opts.databaseUrl,
      options: SESSION_OPTIONS,
      application_name: name,
      connectionTimeoutMillis: 5000,
      ...connectionLimits(this.opts.limits, sending),
    });
    c.on('error', () => undefined);
    await c.connect();
    return c;
  }

  /**
   * Opens the listening connection again in RELISTEN_MS, once however many report its loss: a
   * connection lost as it asks to LISTEN ends and fails its query, and both scheduled a new
   * one, leaving two listeners that delivered every peer message twice.
   */
  private listenLater(): void {
    if (this.closed || this.relisten) return;
    this.relisten = setTimeout(() => {
      this.relisten = undefined;
      if (!this.closed) this.listen().catch(() => this.listenLater());
    }, RELISTEN_MS).unref();
  }

  /** LISTENs; a lost connection is opened again (what was sent meanwhile is not replayed). */
  private async listen(): Promise<void> {
    const c = await this.connect('device-registry-live-listen', false);
    this.listener = c;
    c.on('notification', (msg) => {
      // This instance's own payloads come back too: known by the sending backend, not parsed.
      if (!msg.payload || msg.processId === this.senderPid) return;
      try {
        const env = JSON.parse(msg.payload) as Envelope;
        if (env.o === this.origin) return;
        this.peerSeenAt = performance.now();
        this.peers.set(env.o, this.peerSeenAt);
        if (env.h === 'new' || this.missedBy.has(env.o)) {
          // (a joining instance reads the table back itself; one that missed this one's commits is told to)
          if (env.h === 'new') void this.say('beat');
          this.missedBy.delete(env.o);
          void this.answerJoin(env.o);
        }
        if (env.h === 'written' && env.t === this.origin) this.tell(this.peerWritten, 'peer written');
        if (!env.m && !env.s) return;
        const batch: CommittedBatch = { tenants: [], ids: [], ts: [], received: [], attrs: [] };
        for (const [tenant, id, ts, received, attrs] of [...(env.m ?? []), ...(env.s ?? []).map((w) => [...w, NOT_CARRIED] as Wire)]) {
          batch.tenants.push(tenant);
          batch.ids.push(id);
          batch.ts.push(ts);
          batch.received.push(received);
          batch.attrs.push(attrs);
        }
        this.deliver(batch);
      } catch {
        /* not ours */
      }
    });
    c.on('end', () => {
      if (this.closed) return;
      this.opts.log.warn('lost the live fan-out connection; listening again');
      this.listenLater();
    });
    await c.query(`LISTEN ${NOTIFY_CHANNEL}`);
    void this.say('new');
    if (this.listenedBefore) this.tell(this.relistened, 'relisten');
    this.listenedBefore = true;
  }

  /** Runs the peer-join hooks, then answers `written` to the instance that joined. */
  private async answerJoin(peer: string): Promise<void> {
    await Promise.all(
      [...this.peerJoinHooks].map((h) =>
        h().catch((err: Error) => this.opts.log.warn('could not write before answering a joining instance', { error: err.message })),
      ),
    );
    // (not sent, the sending connection lost: told again once heard again)
    if (!this.closed && !(await this.say('written', peer))) this.missedBy.add(peer);
  }

  private tell(listeners: Set<() => void>, what: string): void {
    for (const l of listeners) {
      try {
        l();
      } catch (err) {
        this.opts.log.error(`live ${what} listener failed`, { error: err as Error });
      }
    }
  }
}
