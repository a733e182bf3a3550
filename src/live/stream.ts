// The live stream, GET /stream on the public listener (protocol: docs/live.md): a WebSocket, or
// Server-Sent Events for `Accept: text/event-stream`. A client sees, for its token's tenant only
// and as its subscription filters (devices, templates, attrs) allow: committed telemetry
// (`attrs`), registry changes (`device`, `template`, `credential`, `tenant`) and device status
// changes (`status`). Every client has a bounded send buffer (LIVE_CLIENT_BUFFER_BYTES): past
// it, its messages are dropped and counted, and once its buffer drained it gets
// `{"type":"lagged","dropped":n}`; nothing here ever waits for a client. When the token expires
// the stream ends: WebSocket close code 4001 `token expired`, SSE a `closed` event, then the end.
import type pg from 'pg';
import client from 'prom-client';
import uWS from 'uWebSockets.js';
import type { Claims, Tokens } from '../auth/tokens.js';
import { errors, type ApiError } from '../errors.js';
import { acceptOf, names } from '../http/accept.js';
import { bearerTokenOf } from '../http/bearer.js';
import { corkedBytes, CORK_RUN_BYTES, writeChunked } from '../http/chunked-write.js';
import { unknownParameter } from '../http/query.js';
import { requestIdFor } from '../http/request-id.js';
import { statusLine } from '../http/status-line.js';
import { NOT_CARRIED, type CommittedBatch } from '../ingest/protocol.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import type { RegistryEvent } from '../registry/events.js';
import type { StatusChange } from '../registry/devices/status.js';
import { microsToText } from '../time.js';
import { atTime, type WallTimer } from '../wall-timer.js';

/** WebSocket close codes of the stream. */
const CLOSE_TOKEN_EXPIRED = 4001;
const CLOSE_SHUTDOWN = 1001;
/** RFC 6455: a message too big to process. */
const CLOSE_TOO_BIG = 1009;
/** The largest client message (a `subscribe`) read. */
const MAX_MESSAGE_BYTES = 64 * 1024;
/** The subprotocol the server selects; a browser offers it beside `bearer.<token>`. */
const SUBPROTOCOL = 'device-registry.live.v1';
const MAX_FILTER_ENTRIES = 10_000;
const SSE_KEEPALIVE_MS = 25_000;

export interface Subscription {
  devices: Set<string> | undefined;
  templates: Set<number> | undefined;
  attrs: Set<string> | undefined;
}

/** A bad subscription: 400 before the stream starts, an `error` message on an open WebSocket. */
class BadSubscription extends Error {}

/** A subscription from `{devices, templates, attrs}` (arrays; absent or null: no filter). */
function parseSubscription(input: { devices?: unknown; templates?: unknown; attrs?: unknown }): Subscription {
  // Template ids may be written as numbers, as the API answers them; device ids and labels are strings.
  const list = (name: string, v: unknown, numbers = false): string[] | undefined => {
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v) || v.some((x) => typeof x !== 'string' && !(numbers && typeof x === 'number')))
      throw new BadSubscription(`${name} must be an array of ${numbers ? 'template ids' : 'strings'}`);
    if (v.length > MAX_FILTER_ENTRIES) throw new BadSubscription(`${name} may list at most ${MAX_FILTER_ENTRIES} entries`);
    return v.map(String);
  };
  const devices = list('devices', input.devices);
  const templates = list('templates', input.templates, true);
  const attrs = list('attrs', input.attrs);
  const ids = templates?.map((t) => {
    if (!/^[0-9]{1,15}$/.test(t)) throw new BadSubscription(`templates must be template ids, got "${t}"`);
    return Number(t);
  });
  return { devices: devices && new Set(devices), templates: ids && new Set(ids), attrs: attrs && new Set(attrs) };
}

/** The query parameters of GET /stream: a misspelt filter would otherwise widen the stream to the whole tenant. */
const QUERY_PARAMS = new Set(['token', 'device', 'template', 'attr', 'max_messages']);
/** The fields of a `subscribe` message. */
const SUBSCRIBE_FIELDS = new Set(['type', 'devices', 'templates', 'attrs']);

/** The subscription of a query string: `device`, `template`, `attr`, each repeatable or comma-separated. */
function subscriptionOfQuery(query: URLSearchParams): Subscription {
  const unknown = unknownParameter(query.keys(), QUERY_PARAMS);
  if (unknown !== undefined)
    throw new BadSubscription(`unknown query parameter "${unknown}" (GET /stream takes ${[...QUERY_PARAMS].join(', ')})`);
  const values = (name: string) => {
    const all = query.getAll(name).flatMap((v) => v.split(',').filter((x) => x !== ''));
    return query.has(name) ? all : undefined;
  };
  return parseSubscription({ devices: values('device'), templates: values('template'), attrs: values('attr') });
}

/**
 * `max_messages`: a positive integer, or absent. Read as every integer query parameter is
 * (docs/api.md "Queries"): decimal digits with an optional sign, blanks around allowed, within
 * 2^53 - 1; the OpenAPI document declares it `integer`, `minimum: 1`, with no maximum.
 */
function maxMessagesOf(query: URLSearchParams): number | undefined {
  const v = query.get('max_messages');
  if (v === null) return undefined;
  const n = /^\s*[+-]?\d+\s*$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) throw new BadSubscription(`max_messages must be a positive integer, got "${v}"`);
  return n;
}

const describe = (s: Subscription) =>
  JSON.stringify({
    type: 'subscribed',
    devices: s.devices ? [...s.devices] : null,
    templates: s.templates ? [...s.templates].map(String) : null,
    attrs: s.attrs ? [...s.attrs] : null,
  });

/**
 * Keeps `c.eventDevices` by registry event `e`, before the template filter is read for it:
 * devices built from a filtered template by it are in, those it built from none of them (or it
 * removed) out; a change that does not say which (a template removed, a tenant-wide change)
 * leaves them to the read.
 */
function trackEventDevices(c: Client, e: RegistryEvent): void {
  const templates = c.sub.templates;
  if (!templates) return;
  switch (e.type) {
    case 'devices.changed': {
      const into = e.templateIds?.some((t) => templates.has(t)) ?? false;
      for (const id of e.deviceIds) {
        if (into) (c.eventDevices ??= new Set()).add(id);
        else c.eventDevices?.delete(id);
      }
      return;
    }
    case 'devices.removed':
      for (const id of e.deviceIds) c.eventDevices?.delete(id);
      return;
    case 'templates.changed':
      if (e.action === 'removed') c.eventDevices = undefined;
      return;
    case 'tenant.changed':
      c.eventDevices = undefined;
      return;
    case 'credentials.changed':
      return;
  }
}

/** One connected client, WebSocket or SSE. */
abstract class Client {
  sub: Subscription = { devices: undefined, templates: undefined, attrs: undefined };
  /** The devices of `sub.templates` (read from the registry; again on every registry change of the tenant). */
  templateDevices: Set<string> | undefined;
  /**
   * Devices a registry event built from a template of `sub.templates` (a creation, an update
   * into it), kept in `templateDevices` whatever a later read finds until an event of theirs
   * takes them out: a read is made after the commits of changes not handled yet, so it misses a
   * device created and removed since, and the removal would otherwise name nothing to the client.
   */
  eventDevices: Set<string> | undefined;
  /** Its `subscribed` message was sent for `sub`: nothing reaches it before (the first message of a subscription is that). */
  ready = false;
  dropped = 0;
  closed = false;
  expiry: WallTimer | undefined;
  /** `max_messages`: how many more messages it gets before its stream ends; undefined: no end. */
  remaining: number | undefined;

  constructor(
    readonly tenant: string,
    readonly hub: LiveHub,
    /** The X-Request-Id of its GET /stream: the lines logged about the stream carry it. */
    readonly requestId: string,
  ) {}

  /** Is device `id` within the device and template filters? */
  wants(id: string): boolean {
    if (!this.ready) return false;
    if (this.sub.devices && !this.sub.devices.has(id)) return false;
    if (this.sub.templates && !this.templateDevices?.has(id)) return false;
    return true;
  }

  /** Sends now, or drops (counted) when the client's buffer is full. */
  abstract send(texts: string[]): void;

  /** The `subscribed` of the subscription now in effect. */
  confirm(text: string): void {
    this.send([text]);
  }
  abstract end(code: number, reason: string): void;

  protected dropping(n: number): void {
    this.dropped += n;
    this.hub.counters.dropped.inc(n);
  }

  /**
   * The texts `max_messages` still allows (not counted yet: `sent` counts those that went out;
   * dropped ones do not count). A client that lost messages keeps the last place for its
   * `lagged`, and what comes meanwhile is lost with them: the caller counts as dropped every
   * text of the batch that did not go out, unless the stream ends with it (`lost`).
   */
  protected allowed(texts: string[]): string[] {
    if (this.remaining === undefined) return texts;
    const room = this.remaining - (this.dropped > 0 ? 1 : 0);
    return texts.length <= room ? texts : texts.slice(0, room);
  }

  /**
   * `out` of a batch of `all` texts went out: the others are lost (counted, told in `lagged`),
   * unless `max_messages` is reached (the stream ends: they were never its). Before (found by a
   * review), those past the limit were not counted when the buffer filled before it: a client
   * was told of fewer than it lost.
   */
  protected lost(all: number, out: number): void {
    if (out < all && this.remaining !== 0) this.dropping(all - out);
  }

  /** `n` messages went out (lagged included): counted toward `max_messages`. */
  protected sent(n: number): void {
    if (this.remaining !== undefined) this.remaining -= n;
  }

  /** Ends the stream once `max_messages` were sent. */
  protected finishIfDone(): void {
    if (this.remaining !== 0 || this.closed) return;
    this.end(1000, 'max_messages reached');
    this.hub.forget(this);
  }
}

type WsData = {
  client?: WsClient;
  tenant: string;
  claims: Claims;
  sub: Subscription;
  maxMessages: number | undefined;
  requestId: string;
};

class WsClient extends Client {
  constructor(
    tenant: string,
    hub: LiveHub,
    private readonly ws: uWS.WebSocket<WsData>,
    private readonly limit: number,
    requestId: string,
  ) {
    super(tenant, hub, requestId);
  }

  /**
   * A `subscribed` that found the buffer full: the client waits for it (docs/live.md §2), so it
   * is not dropped but kept, the latest only, and goes out first once there is room (before, it
   * was dropped and only counted in `lagged`: found by an audit).
   */
  private confirmation: string | undefined;

  override confirm(text: string): void {
    if (this.closed) return;
    this.confirmation = text;
    this.send([]);
  }

  send(batch: string[]): void {
    if (this.closed) return;
    let all = batch;
    if (this.confirmation !== undefined && this.ws.getBufferedAmount() <= this.limit) {
      all = [this.confirmation, ...batch];
      this.confirmation = undefined;
    }
    if (all.length === 0) return;
    const texts = this.allowed(all);
    let i = 0;
    this.ws.cork(() => {
      for (; i < texts.length; i++) {
        if (this.ws.getBufferedAmount() > this.limit) break;
        this.ws.send(texts[i]!);
      }
    });
    this.hub.counters.sent.inc(i);
    this.sent(i);
    this.lost(all.length, i);
    this.finishIfDone();
  }

  /** uWS's drain: the buffer went down; a client that lost messages is told how many. */
  drained(): void {
    if (this.closed) return;
    if (this.confirmation !== undefined && this.ws.getBufferedAmount() < this.limit / 2) this.send([]);
    if (this.closed) return;
    if (this.dropped > 0 && this.ws.getBufferedAmount() < this.limit / 2) {
      const n = this.dropped;
      this.dropped = 0;
      this.ws.send(JSON.stringify({ type: 'lagged', dropped: n }));
      this.sent(1);
      this.finishIfDone();
    }
  }

  end(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.ws.end(code, reason);
  }
}

class SseClient extends Client {
  /** uWS said its buffer is full: messages are dropped until it can write again. */
  private choked = false;
  private readonly keepAlive: NodeJS.Timeout;

  constructor(
    tenant: string,
    hub: LiveHub,
    private readonly res: uWS.HttpResponse,
    requestId: string,
  ) {
    super(tenant, hub, requestId);
    res.onWritable(() => {
      this.choked = false;
      if (this.dropped > 0) {
        const n = this.dropped;
        this.dropped = 0;
        this.write([JSON.stringify({ type: 'lagged', dropped: n })]);
        // (its last place under max_messages: the stream ends after it, once out of this handler)
        if (this.remaining === 0) setImmediate(() => this.finishIfDone());
      } else {
        // uWS drains what it buffered only on a write once an onWritable handler is set: an
        // empty comment sends the rest of the last message now, not at the next keep-alive.
        this.writeRaw(':\n\n');
      }
      return !this.choked;
    });
    this.keepAlive = setInterval(() => this.comment(), SSE_KEEPALIVE_MS);
    this.keepAlive.unref();
  }

  send(all: string[]): void {
    if (this.closed) return;
    if (this.choked) {
      // (all lost: the limit is not reached while it is open, so none of them was past it)
      this.dropping(all.length);
      return;
    }
    const texts = this.allowed(all);
    this.lost(all.length, this.writeUntilChoked(texts));
    this.finishIfDone();
  }

  /**
   * Writes the texts one by one until uWS has to buffer one (its write answers false) and
   * answers how many went out: the rest are dropped, so uWS holds at most one message for a
   * client that stopped reading, not a whole commit's batch (before, found by an audit, a paused
   * client held 28 MiB of one burst's batches with LIVE_CLIENT_BUFFER_BYTES at 1 MiB). Corked in
   * runs that fit uWS's cork buffer, a larger message alone (src/http/chunked-write.ts: before,
   * found by CI, a message that did not fit was lost on a full socket, and the stream broken).
   */
  private writeUntilChoked(texts: string[]): number {
    let i = 0;
    while (i < texts.length && !this.choked) {
      const frame = `data: ${texts[i]}\n\n`;
      if (corkedBytes(frame) > CORK_RUN_BYTES) {
        i++;
        if (!writeChunked(this.res, frame)) this.choked = true;
        continue;
      }
      this.res.cork(() => {
        let room = CORK_RUN_BYTES;
        for (let next = frame; ; next = `data: ${texts[i]}\n\n`) {
          const bytes = corkedBytes(next);
          if (bytes > room) break;
          room -= bytes;
          i++;
          if (!this.res.write(next)) this.choked = true;
          if (this.choked || i === texts.length) break;
        }
      });
    }
    this.hub.counters.sent.inc(i);
    this.sent(i);
    return i;
  }

  private write(texts: string[]): void {
    this.writeRaw(texts.map((t) => `data: ${t}\n\n`).join(''));
    this.hub.counters.sent.inc(texts.length);
    this.sent(texts.length);
  }

  private writeRaw(text: string): void {
    if (!writeChunked(this.res, text)) this.choked = true;
  }

  private comment(): void {
    if (this.closed || this.choked) return;
    this.res.cork(() => this.res.write(': keep-alive\n\n'));
  }

  end(_code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.keepAlive);
    this.res.cork(() => {
      this.res.write(`event: closed\ndata: ${JSON.stringify({ type: 'closed', reason })}\n\n`);
      this.res.end();
    });
  }

  /** The client went away. */
  gone(): void {
    this.closed = true;
    clearInterval(this.keepAlive);
  }
}

export interface LiveHubOptions {
  pool: pg.Pool;
  tokens: Tokens;
  metrics: Metrics;
  log: Logger;
  /** LIVE_CLIENT_BUFFER_BYTES. */
  bufferBytes: number;
  /** LIVE_MAX_CLIENTS_PER_TENANT: each client may hold up to bufferBytes, so this bounds a tenant's memory. */
  maxClientsPerTenant: number;
}

/**
 * Which clients may want a device's telemetry: those whose subscription names the device, and
 * those that name no device (each then checked with `wants`). Without it every committed
 * message was checked against every client of its tenant: measured at 48,000 msg/s with 100
 * clients, ingest lost 15 % to that loop.
 */
class TelemetryIndex {
  private readonly named = new Map<string, Set<Client>>();
  private readonly open = new Map<string, Set<Client>>();
  /** The keys each client is under (its tenant's open set: undefined). */
  private readonly under = new Map<Client, string[] | undefined>();

  put(c: Client): void {
    this.remove(c);
    const ids = c.sub.devices;
    const keys = ids && [...ids].map((id) => `${c.tenant}\0${id}`);
    for (const k of keys ?? [c.tenant]) TelemetryIndex.add(keys ? this.named : this.open, k, c);
    this.under.set(c, keys);
  }

  remove(c: Client): void {
    if (!this.under.has(c)) return;
    const keys = this.under.get(c);
    this.under.delete(c);
    for (const k of keys ?? [c.tenant]) {
      const map = keys ? this.named : this.open;
      const set = map.get(k);
      set?.delete(c);
      if (set?.size === 0) map.delete(k);
    }
  }

  clear(): void {
    this.named.clear();
    this.open.clear();
    this.under.clear();
  }

  /** The clients naming the device, then those naming none (never both). */
  candidates(tenant: string, id: string): [Set<Client> | undefined, Set<Client> | undefined] {
    return [this.named.get(`${tenant}\0${id}`), this.open.get(tenant)];
  }

  private static add(map: Map<string, Set<Client>>, key: string, c: Client): void {
    let set = map.get(key);
    if (!set) map.set(key, (set = new Set()));
    set.add(c);
  }
}

/** Every client of this instance, by tenant, and what reaches them. */
export class LiveHub {
  private readonly byTenant = new Map<string, Set<Client>>();
  private readonly telemetry = new TelemetryIndex();
  /**
   * Registry changes and subscriptions of a tenant, one after another: each may read the template
   * filters first (one query for every client of the tenant), and a client sees them in the
   * order they happened (a device created, then removed; its `subscribed` first).
   */
  private readonly turns = new Map<string, Promise<void>>();
  /** Clients admitted but not yet added (a WebSocket between its upgrade and its open), by tenant: they count toward the limit. */
  private readonly admitting = new Map<string, number>();
  readonly counters: { sent: client.Counter; dropped: client.Counter };
  private closing = false;

  constructor(private readonly opts: LiveHubOptions) {
    const registers = [opts.metrics.registry];
    this.counters = {
      sent: new client.Counter({ name: 'live_messages_sent_total', help: 'Messages written to live stream clients', registers }),
      dropped: new client.Counter({
        name: 'live_messages_dropped_total',
        help: 'Messages dropped for live stream clients whose send buffer was full (LIVE_CLIENT_BUFFER_BYTES)',
        registers,
      }),
    };
    const clients = (kind: 'ws' | 'sse') =>
      [...this.byTenant.values()].reduce((n, s) => n + [...s].filter((c) => c instanceof (kind === 'ws' ? WsClient : SseClient)).length, 0);
    new client.Gauge({
      name: 'live_clients',
      help: 'Live stream clients connected, by transport (ws, sse)',
      labelNames: ['transport'] as const,
      registers,
      collect() {
        this.labels('ws').set(clients('ws'));
        this.labels('sse').set(clients('sse'));
      },
    });
  }

  /** What an answer of these handlers is logged and counted with (as the routed requests are: src/http/server.ts). */
  private request(req: uWS.HttpRequest, route: string): { id: string; route: string; started: number } {
    return { id: requestIdFor(req.getHeader('x-request-id')), route, started: performance.now() };
  }

  /** The answer's head is written (a stream goes on): counted in the HTTP metrics, and a debug line with its request id. */
  private answered(request: { id: string; route: string; started: number }, status: number): void {
    const seconds = (performance.now() - request.started) / 1000;
    this.opts.metrics.observeHttp('GET', request.route, status, seconds);
    if (this.opts.log.level === 'debug')
      this.opts.log.debug('request', { requestId: request.id, method: 'GET', path: request.route, status, ms: Math.round(seconds * 1000) });
  }

  /** GET /stream on the public app: the WebSocket upgrade, and SSE for the other GETs. */
  attach(app: uWS.TemplatedApp): void {
    // `/stream/` as well: a GET path may end with '/' everywhere else (src/http/router.ts).
    for (const path of ['/stream', '/stream/']) this.attachAt(app, path);
  }

  private attachAt(app: uWS.TemplatedApp, path: string): void {
    app.ws<WsData>(path, {
      // Past MAX_MESSAGE_BYTES the client is told (1009); uWS itself drops a connection whose
      // message exceeds maxPayloadLength without a close frame, so that bound is set higher.
      maxPayloadLength: MAX_MESSAGE_BYTES * 16,
      idleTimeout: 120,
      sendPingsAutomatically: true,
      maxBackpressure: this.opts.bufferBytes * 2,
      closeOnBackpressureLimit: 0,
      upgrade: (res, req, context) => this.upgrade(res, req, context),
      open: (ws) => {
        const data = ws.getUserData();
        const c = new WsClient(data.tenant, this, ws, this.opts.bufferBytes, data.requestId);
        data.client = c;
        this.add(c, data.claims, data.sub, data.maxMessages);
      },
      message: (ws, message) => {
        const c = ws.getUserData().client;
        if (!c) return;
        if (message.byteLength > MAX_MESSAGE_BYTES) {
          c.end(CLOSE_TOO_BIG, `message too big: at most ${MAX_MESSAGE_BYTES} bytes`);
          this.forget(c);
          return;
        }
        this.resubscribe(c, Buffer.from(message).toString('utf8'));
      },
      drain: (ws) => ws.getUserData().client?.drained(),
      close: (ws) => {
        const c = ws.getUserData().client;
        if (c) this.forget(c);
      },
    });
    app.get(path, (res, req) => this.sse(res, req));
  }

  /** Committed telemetry: one `attrs` message per stored message, to each client that wants it. */
  committed(batch: CommittedBatch): void {
    let texts: Map<Client, string[]> | undefined;
    const full: Array<string | undefined> = [];
    const members: Array<Array<[string, string]> | undefined> = [];
    for (let i = 0; i < batch.ids.length; i++) {
      const id = batch.ids[i]!;
      if (batch.attrs[i] === NOT_CARRIED) continue;
      for (const clients of this.telemetry.candidates(batch.tenants[i]!, id)) {
        if (!clients) continue;
        for (const c of clients) {
          if (!c.wants(id)) continue;
          let text: string | undefined;
          if (c.sub.attrs) {
            const all = (members[i] ??= objectMembers(batch.attrs[i]!));
            const kept = all.filter(([k]) => c.sub.attrs!.has(k));
            if (kept.length === 0) continue;
            text = attrsText(id, batch.ts[i]!, '{' + kept.map(([k, v]) => JSON.stringify(k) + ':' + v).join(',') + '}');
          } else {
            text = full[i] ??= attrsText(id, batch.ts[i]!, batch.attrs[i]!);
          }
          texts ??= new Map();
          const list = texts.get(c);
          if (list) list.push(text);
          else texts.set(c, [text]);
        }
      }
    }
    if (texts) for (const [c, list] of texts) c.send(list);
  }

  /**
   * A device's status changed. Behind the tenant's registry changes still being handled: a
   * change of the device's templates is what changed its status (its timeout), and the client
   * filters by what that change made of them (found by a review: a device moved out of a
   * filtered template reached some clients as `status` before `device` `updated`, others not).
   */
  statusChanged(s: StatusChange): void {
    const text = JSON.stringify({ type: 'status', device_id: s.deviceId, status: s.status, last_seen: s.lastSeen });
    const deliver = () => {
      for (const c of this.byTenant.get(s.tenant) ?? []) if (c.wants(s.deviceId)) c.send([text]);
    };
    if (this.turns.has(s.tenant)) this.inTurn(s.tenant, () => Promise.resolve(deliver()));
    else deliver();
  }

  /** A registry change (of any instance); template filters are read again first when devices may have moved. */
  registryChanged(e: RegistryEvent): void {
    const tenants = e.tenant === '*' ? [...this.byTenant.keys()] : [e.tenant];
    const moves = e.type !== 'devices.removed' && e.type !== 'credentials.changed';
    for (const tenant of tenants)
      this.inTurn(tenant, async () => {
        const clients = [...(this.byTenant.get(tenant) ?? [])];
        // A device that an update takes out of a client's template filter is named to it too.
        const before =
          e.type === 'devices.changed'
            ? new Map(clients.filter((c) => c.sub.templates).map((c) => [c, new Set(e.deviceIds.filter((id) => c.wants(id)))]))
            : undefined;
        for (const c of clients) trackEventDevices(c, e);
        if (moves) await this.resolveTemplates(tenant, clients);
        for (const c of clients) this.deliverChange(c, e, before?.get(c));
      });
  }
  /** Ends every stream (shutdown). */
  close(): void {
    this.closing = true;
    for (const set of this.byTenant.values())
      for (const c of set) {
        c.expiry?.cancel();
        c.end(CLOSE_SHUTDOWN, 'server shutting down');
      }
    this.byTenant.clear();
    this.telemetry.clear();
  }

  private deliverChange(c: Client, e: RegistryEvent, wantedBefore?: Set<string>): void {
    if (!c.ready || c.closed) return;
    switch (e.type) {
      case 'devices.changed':
      case 'devices.removed': {
        const ids = e.deviceIds.filter((id) => c.wants(id) || wantedBefore?.has(id));
        if (e.type === 'devices.removed') for (const id of e.deviceIds) c.templateDevices?.delete(id);
        if (ids.length === 0) return;
        const action = e.type === 'devices.removed' ? 'removed' : (e.action ?? 'updated');
        c.send([JSON.stringify({ type: 'device', action, device_ids: ids })]);
        return;
      }
      case 'templates.changed': {
        const ids = e.templateIds.filter((id) => !c.sub.templates || c.sub.templates.has(id));
        if (ids.length === 0) return;
        c.send([JSON.stringify({ type: 'template', action: e.action ?? 'updated', template_ids: ids.map(String) })]);
        return;
      }
      case 'credentials.changed': {
        if (!c.wants(e.deviceId)) return;
        // Ids only: a secret never leaves the credentials service.
        const removed = e.removedIds.length > 0;
        c.send([
          JSON.stringify(
            removed
              ? { type: 'credential', action: 'removed', device_id: e.deviceId, credential_ids: e.removedIds }
              : { type: 'credential', action: 'added', device_id: e.deviceId },
          ),
        ]);
        return;
      }
      case 'tenant.changed':
        c.send([JSON.stringify({ type: 'tenant', action: 'changed' })]);
        return;
    }
  }

  /**
   * Runs `step` after the tenant's earlier registry changes and subscriptions; a failure is logged, the next step runs.
   * A failed step is the re-read of every template filter of the tenant's streams after a registry change (a
   * subscription logs its own failure, with its request's id): its line names the tenant, no one request.
   */
  private inTurn(tenant: string, step: () => Promise<void>): void {
    const turn = (this.turns.get(tenant) ?? Promise.resolve())
      .then(step)
      .catch((err: Error) =>
        this.opts.log.warn('live: reading the template filters again after a registry change failed', { tenant, error: err.message }),
      )
      .finally(() => {
        if (this.turns.get(tenant) === turn) this.turns.delete(tenant);
      });
    this.turns.set(tenant, turn);
  }

  /** The devices of the template filters of these clients (of one tenant), read in one query for all of them. */
  private async resolveTemplates(tenant: string, clients: Client[]): Promise<void> {
    const filtered = clients.filter((c) => c.sub.templates);
    for (const c of clients) if (!c.sub.templates) c.templateDevices = undefined;
    if (filtered.length === 0) return;
    const subs = filtered.map((c) => [c, c.sub.templates!] as const);
    const wanted = [...new Set(subs.flatMap(([, t]) => [...t]))];
    const { rows } = await this.opts.pool.query<{ template_id: string; device_id: string }>(
      'SELECT template_id::text, device_id FROM device_templates WHERE tenant = $1 AND template_id = ANY($2::bigint[])',
      [tenant, wanted],
    );
    const byTemplate = new Map<number, Set<string>>();
    for (const r of rows) {
      const t = Number(r.template_id);
      let set = byTemplate.get(t);
      if (!set) byTemplate.set(t, (set = new Set()));
      set.add(r.device_id);
    }
    for (const [c, templates] of subs) {
      if (c.sub.templates !== templates) continue; // subscribed anew meanwhile: its own turn reads it
      const devices = new Set<string>(c.eventDevices);
      for (const t of templates) for (const id of byTemplate.get(t) ?? []) devices.add(id);
      c.templateDevices = devices;
    }
  }

  private add(c: Client, claims: Claims, sub: Subscription, maxMessages: number | undefined): void {
    c.remaining = maxMessages;
    if (this.closing) {
      c.end(CLOSE_SHUTDOWN, 'server shutting down');
      return;
    }
    let set = this.byTenant.get(c.tenant);
    if (!set) this.byTenant.set(c.tenant, (set = new Set()));
    set.add(c);
    // The token's end is the stream's end.
    c.expiry = atTime(claims.exp * 1000, () => {
      c.end(CLOSE_TOKEN_EXPIRED, 'token expired');
      this.forget(c);
    });
    this.subscribe(c, sub);
  }

  /** A client whose stream ended or went away. */
  forget(c: Client): void {
    c.closed = true;
    c.expiry?.cancel();
    const set = this.byTenant.get(c.tenant);
    set?.delete(c);
    if (set?.size === 0) this.byTenant.delete(c.tenant);
    this.telemetry.remove(c);
  }

  private subscribe(c: Client, sub: Subscription): void {
    c.sub = sub;
    c.ready = false;
    c.templateDevices = undefined;
    c.eventDevices = undefined;
    if (!c.closed) this.telemetry.put(c);
    this.inTurn(c.tenant, async () => {
      if (c.sub !== sub || c.closed) return;
      try {
        await this.resolveTemplates(c.tenant, [c]);
      } catch (err) {
        // The subscription then matches no device of its templates until the tenant's next
        // registry change. Logged here, with the stream request's id (the turn logs the others).
        this.opts.log.warn('live: reading a template filter failed', { requestId: c.requestId, error: (err as Error).message });
      } finally {
        if (c.sub === sub) {
          c.ready = true;
          c.confirm(describe(sub));
        }
      }
    });
  }

  /** A WebSocket message: a new subscription replaces the old one; anything else is answered with an error. */
  private resubscribe(c: Client, text: string): void {
    let sub: Subscription;
    try {
      const msg = JSON.parse(text) as { type?: unknown };
      if (msg === null || typeof msg !== 'object' || Array.isArray(msg) || msg.type !== 'subscribe')
        throw new BadSubscription('expected {"type":"subscribe", ...}');
      const unknown = Object.keys(msg).find((k) => !SUBSCRIBE_FIELDS.has(k));
      if (unknown !== undefined)
        throw new BadSubscription(`unknown field "${unknown}" (a subscribe message has devices, templates, attrs)`);
      sub = parseSubscription(msg as Record<string, unknown>);
    } catch (err) {
      const message = err instanceof BadSubscription ? err.message : 'the message is not JSON';
      c.send([JSON.stringify({ type: 'error', message })]);
      return;
    }
    this.subscribe(c, sub);
  }

  /** The token of a stream request: Authorization header, `token` query parameter, or subprotocol `bearer.<token>`. */
  private async claimsOf(authorization: string, query: URLSearchParams, protocols: string[]): Promise<Claims | undefined> {
    const token =
      bearerTokenOf(authorization) ?? query.get('token') ?? protocols.find((p) => p.startsWith('bearer.'))?.slice('bearer.'.length);
    return token ? this.opts.tokens.verify(token) : undefined;
  }

  private upgrade(res: uWS.HttpResponse, req: uWS.HttpRequest, context: uWS.us_socket_context_t): void {
    const authorization = req.getHeader('authorization');
    const query = new URLSearchParams(req.getQuery() ?? '');
    const key = req.getHeader('sec-websocket-key');
    const protocols = req
      .getHeader('sec-websocket-protocol')
      .split(',')
      .map((p) => p.trim())
      .filter((p) => p !== '');
    const extensions = req.getHeader('sec-websocket-extensions');
    const request = this.request(req, '/stream');
    let aborted = false;
    res.onAborted(() => (aborted = true));
    void this.admit(authorization, query, protocols).then((admitted) => {
      if (aborted) {
        if (!('error' in admitted)) this.admitted(admitted.claims.service);
        return;
      }
      this.answered(request, 'error' in admitted ? admitted.status : 101);
      res.cork(() => {
        if ('error' in admitted) {
          writeError(res, admitted.status, admitted.error, request.id, this.closing);
          return;
        }
        // The 101 echoes X-Request-Id as every answer does: upgrade() writes its status line only
        // when none was written, and its own headers after ours.
        res.writeStatus(statusLine(101));
        res.writeHeader('X-Request-Id', request.id);
        // A browser that offered subprotocols needs one of them back: ours (admit refused any other offer).
        const chosen = protocols.length > 0 ? SUBPROTOCOL : '';
        res.upgrade<WsData>(
          {
            tenant: admitted.claims.service,
            claims: admitted.claims,
            sub: admitted.sub,
            maxMessages: admitted.maxMessages,
            requestId: request.id,
          },
          key,
          chosen,
          extensions,
          context,
        );
        // (uWS opens the socket within upgrade(): the client is counted among the tenant's now.)
        this.admitted(admitted.claims.service);
      });
    });
  }

  private sse(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    const authorization = req.getHeader('authorization');
    const accept = acceptOf(req);
    const query = new URLSearchParams(req.getQuery() ?? '');
    const request = this.request(req, '/stream');
    let client: SseClient | undefined;
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
      if (client) {
        client.gone();
        this.forget(client);
      }
    });
    void this.admit(authorization, query, []).then((admitted) => {
      if (!('error' in admitted)) this.admitted(admitted.claims.service);
      if (aborted) return;
      if ('error' in admitted) {
        this.answered(request, admitted.status);
        res.cork(() => writeError(res, admitted.status, admitted.error, request.id, this.closing));
        return;
      }
      if (!names(accept, 'text/event-stream')) {
        this.answered(request, 400);
        const e = errors.notAStream();
        res.cork(() => writeError(res, e.httpStatus, e.message, request.id, this.closing));
        return;
      }
      this.answered(request, 200);
      res.cork(() => {
        res.writeStatus(statusLine(200));
        res.writeHeader('X-Request-Id', request.id);
        res.writeHeader('Content-Type', 'text/event-stream');
        res.writeHeader('Cache-Control', 'no-cache');
        // nginx buffers proxied answers by default: this asks it not to (each event as it comes).
        res.writeHeader('X-Accel-Buffering', 'no');
        res.write(': device-registry live stream\n\n');
      });
      client = new SseClient(admitted.claims.service, this, res, request.id);
      this.add(client, admitted.claims, admitted.sub, admitted.maxMessages);
    });
  }

  private async admit(
    authorization: string,
    query: URLSearchParams,
    protocols: string[],
  ): Promise<{ claims: Claims; sub: Subscription; maxMessages: number | undefined } | { status: number; error: string }> {
    if (this.closing) return refusal(errors.streamShuttingDown());
    if (!authorization && !query.has('token') && !protocols.some((p) => p.startsWith('bearer.'))) return refusal(errors.noToken());
    const claims = await this.claimsOf(authorization, query, protocols);
    if (!claims) return refusal(errors.invalidToken());
    // The answer names one of the offered subprotocols: ours, never another (the token one would echo the token).
    if (protocols.length > 0 && !protocols.includes(SUBPROTOCOL)) return refusal(errors.streamSubprotocol(SUBPROTOCOL));
    let sub: Subscription;
    let maxMessages: number | undefined;
    try {
      sub = subscriptionOfQuery(query);
      maxMessages = maxMessagesOf(query);
    } catch (err) {
      if (err instanceof BadSubscription) return { status: 400, error: err.message };
      throw err;
    }
    const tenant = claims.service;
    const open = (this.byTenant.get(tenant)?.size ?? 0) + (this.admitting.get(tenant) ?? 0);
    if (open >= this.opts.maxClientsPerTenant) return refusal(errors.tooManyStreams(this.opts.maxClientsPerTenant));
    this.admitting.set(tenant, (this.admitting.get(tenant) ?? 0) + 1);
    return { claims, sub, maxMessages };
  }

  /** An admitted client was added, or will never be (it went away first). */
  private admitted(tenant: string): void {
    const n = (this.admitting.get(tenant) ?? 1) - 1;
    if (n > 0) this.admitting.set(tenant, n);
    else this.admitting.delete(tenant);
  }
}

/**
 * The members of a committed message's `attrs` text (`{"label":value,...}`, as ingest writes it:
 * no blanks) as [label, value text], the values' text as stored, not parsed and written again:
 * a value nested deeper than this thread's stack lets JSON.stringify go is stored all the same
 * (ingest stores up to 10,000 levels; here it goes ~4,000), and writing it here threw RangeError,
 * which lost every `attrs` message of its commit (found by an audit).
 */
function objectMembers(text: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let i = 1; // past '{'
  while (i < text.length && text[i] !== '}') {
    const keyEnd = stringEnd(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    const start = keyEnd + 1; // past ':'
    let depth = 0;
    for (i = start; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 0x22) i = stringEnd(text, i) - 1;
      else if (c === 0x7b || c === 0x5b) depth++;
      else if (c === 0x7d || c === 0x5d) {
        if (depth === 0) break;
        depth--;
      } else if (c === 0x2c && depth === 0) break;
    }
    out.push([key, text.slice(start, i)]);
    if (text[i] === ',') i++;
  }
  return out;
}

/** The index just past the JSON string that starts (with its quote) at `i`. */
function stringEnd(text: string, i: number): number {
  for (let j = i + 1; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (c === 0x5c) j++;
    else if (c === 0x22) return j + 1;
  }
  return text.length;
}

const attrsText = (id: string, tsUs: number, attrs: string) =>
  `{"type":"attrs","device_id":${JSON.stringify(id)},"ts":"${microsToText(tsUs)}","attrs":${attrs}}`;

/** A refused stream request, as `admit` answers it. */
const refusal = (e: ApiError) => ({ status: e.httpStatus, error: e.message });

/** A refusal; `closing` (shutdown): the connection closes after it, as every answer of the drain does. */
function writeError(res: uWS.HttpResponse, status: number, message: string, requestId: string, closing: boolean): void {
  res.writeStatus(statusLine(status));
  res.writeHeader('X-Request-Id', requestId);
  res.writeHeader('Content-Type', 'application/json');
  res.end(JSON.stringify({ message, status }), closing);
}
