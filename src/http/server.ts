// The uWebSockets.js adapter: two listeners (public and internal), each with its own routes.
// A request is one `Exchange`, built while uWS's `req` is still valid (it dies when the uWS
// handler returns): everything needed from `req` is read then, `onAborted` is set and the body
// starts to be read. Then, in steps: the token (before routing, so unknown routes answer 401
// too), the route (404, 405), the body as JSON, the query against the route's schema, the
// handler; the answer is written corked, unless the client went away. Every answer carries the
// request's id (`X-Request-Id`, the client's when it sent a usable one), and so does every log
// line about the request.
//
// Shutdown (`close`): the listeners stop accepting; requests in flight finish, and every answer
// from then on closes its connection; at the drain deadline a request still running is answered
// 503, and then every connection is closed, idle keep-alive ones included.
import net from 'node:net';
import uWS from 'uWebSockets.js';
import type { Claims, Tokens } from '../auth/tokens.js';
import { isDatabaseUnavailable } from '../db/pool.js';
import { ApiError, errors } from '../errors.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import { hostPort } from '../net.js';
import type { QueryLimits } from '../schemas/queries.js';
import type { QueryCheck, QueryFailure, QueryValues } from '../schemas/validator.js';
import { acceptOf } from './accept.js';
import { bearerTokenOf } from './bearer.js';
import { BodyAborted, parseJson, readBody } from './body.js';
import { writeChunked } from './chunked-write.js';
import { requestIdFor } from './request-id.js';
import { statusLine } from './status-line.js';
import { operationKey, queryChecks } from './route.js';
import { Router, type Endpoint, type Match } from './router.js';
import type { BodyDecl, Listener, Method, Reply, Request, Route, StreamOut } from './types.js';

/** uWS's LIBUS_LISTEN_EXCLUSIVE_PORT (exported at runtime, missing from its types). */
const LISTEN_EXCLUSIVE_PORT = (uWS as unknown as { LIBUS_LISTEN_EXCLUSIVE_PORT: number }).LIBUS_LISTEN_EXCLUSIVE_PORT;

/**
 * Shutdown: connections are closed once no request has begun or ended for this long. A client
 * that keeps a connection busy gets \`Connection: close\` on its next answer and leaves cleanly;
 * closing a connection the moment its client sends on it is the race this makes rare.
 */
const QUIET_BEFORE_CLOSE_MS = 250;
const KNOWN_METHODS = new Set(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS']);
const NO_VALUES: QueryValues = Object.freeze({});
const NO_PARAMS: Record<string, string> = Object.freeze({});

export interface HttpOptions {
  publicHost: string;
  publicPort: number;
  internalHost: string;
  internalPort: number;
  maxBodyBytes: number;
  routes: Route[];
  /** The configured limits of the query schemas, which are compiled once here. */
  queryLimits: QueryLimits;
  tokens: Tokens;
  metrics: Metrics;
  log: Logger;
  /** Adds handlers of its own to the public app before the routes (the live stream's WebSocket and SSE). */
  publicApp?: (app: uWS.TemplatedApp) => void;
}

export interface HttpServer {
  publicPort: number;
  internalPort: number;
  /**
   * Stops accepting connections and lets the requests in flight finish until `drainUntil`
   * (epoch ms); those still running then are answered 503. Then every connection is closed.
   * Resolves with the number of requests answered 503 so; called again, the same promise.
   */
  close(drainUntil: number): Promise<number>;
}

/** One listener's routes, and what every request on it needs. */
interface Site {
  listener: Listener;
  router: Router;
  maxBodyBytes: number;
  tokens: Tokens;
  metrics: Metrics;
  log: Logger;
  inFlight: InFlight;
}

export async function startHttp(opts: HttpOptions): Promise<HttpServer> {
  const inFlight = new InFlight();
  const checks = queryChecks(opts.routes, opts.queryLimits);
  const site = (listener: Listener): Site => ({
    listener,
    router: routerOf(opts.routes, listener, checks),
    maxBodyBytes: opts.maxBodyBytes,
    tokens: opts.tokens,
    metrics: opts.metrics,
    log: opts.log,
    inFlight,
  });
  const pub = await listen(site('public'), opts.publicHost, opts.publicPort, opts.publicApp);
  const internal = await listen(site('internal'), opts.internalHost, opts.internalPort).catch((err) => {
    uWS.us_listen_socket_close(pub.socket);
    pub.app.close();
    throw err;
  });
  opts.log.info('public HTTP API listening', { address: `http://${hostPort(opts.publicHost, pub.port)}` });
  opts.log.info('internal HTTP API listening', { address: `http://${hostPort(opts.internalHost, internal.port)}` });
  let closing: Promise<number> | undefined;
  const close = async (drainUntil: number) => {
    uWS.us_listen_socket_close(pub.socket);
    uWS.us_listen_socket_close(internal.socket);
    inFlight.draining = true;
    await inFlight.quiet(drainUntil, QUIET_BEFORE_CLOSE_MS);
    const cutOff = inFlight.cutOff();
    for (const ex of cutOff) {
      ex.logger().warn('request cut off by shutdown: answered 503', {
        method: ex.sentMethod,
        path: ex.path,
        ms: Math.round(performance.now() - ex.started),
      });
      const e = errors.shuttingDown();
      send(ex, { status: e.httpStatus, body: e.body }, true);
    }
    // Idle keep-alive connections too: nothing is in flight on them now.
    pub.app.close();
    internal.app.close();
    return cutOff.length;
  };
  return {
    publicPort: pub.port,
    internalPort: internal.port,
    close: (drainUntil) => (closing ??= close(drainUntil)),
  };
}

function routerOf(routes: Route[], listener: Listener, checks: ReadonlyMap<string, QueryCheck>): Router {
  const router = new Router();
  for (const r of routes) if ((r.listeners ?? ['public']).includes(listener)) router.add(r, checks.get(operationKey(r)));
  return router;
}

/** uWS's App.close() (closes every socket of the app; exported at runtime, missing from its types). */
type ClosableApp = uWS.TemplatedApp & { close(): void };

function listen(
  site: Site,
  host: string,
  port: number,
  setup?: (app: uWS.TemplatedApp) => void,
): Promise<{ app: ClosableApp; socket: uWS.us_listen_socket; port: number }> {
  const app = uWS.App() as ClosableApp;
  setup?.(app);
  app.any('/*', (res, req) => serve(site, res, req));
  return new Promise((resolve, reject) => {
    // Exclusive: uWS otherwise binds with SO_REUSEPORT, and a second instance given the same
    // port would share it silently, splitting the requests between the two. uWS's typings have
    // no listen(host, port, options, cb) overload, which its runtime has.
    const listenExclusive = app.listen.bind(app) as unknown as (
      h: string,
      p: number,
      o: number,
      cb: (s: uWS.us_listen_socket | false) => void,
    ) => void;
    listenExclusive(host, port, LISTEN_EXCLUSIVE_PORT, (socket) => {
      if (!socket) {
        const names = site.listener === 'public' ? 'PORT/HOST' : 'INTERNAL_PORT/INTERNAL_HOST';
        void listenFailureCause(host, port).then((cause) =>
          reject(new Error(`cannot listen on ${hostPort(host, port)} (${names}); ${cause}`)),
        );
        return;
      }
      resolve({ app, socket, port: uWS.us_socket_local_port(socket) });
    });
  });
}

/**
 * Why a listen failed: uWS says only that it did, so the same bind is tried with Node's net for
 * the system's reason (a host that is no address of this machine is no taken port).
 */
function listenFailureCause(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRNOTAVAIL') resolve('no network interface of this machine has that address');
      else if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') resolve('the host name does not resolve');
      else if (err.code === 'EACCES') resolve('permission denied (a port below 1024 needs privileges)');
      else resolve('is the port taken?');
    });
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve('is the port taken?')));
  });
}

/** The uWS handler: the exchange is built now, synchronously; the rest runs after. */
function serve(site: Site, res: uWS.HttpResponse, req: uWS.HttpRequest): void {
  const ex = new Exchange(site, res, req);
  site.inFlight.begin(ex);
  // `answer` turns a handler's failure into a reply; what can still throw is writing that reply.
  answer(site, ex)
    .catch((err: unknown) =>
      ex
        .logger()
        .error('answering a request failed', { method: ex.sentMethod, path: ex.path, error: err instanceof Error ? err : String(err) }),
    )
    .finally(() => site.inFlight.end(ex));
}

/**
 * One request from socket to answer: what was read from uWS's `req`, what the steps found
 * (claims, body, query values), and whether the answer was written. Handlers see it as a
 * `Request`. Every field is set in the constructor, so every exchange has the same shape.
 */
class Exchange implements Request {
  readonly started = performance.now();
  /** As sent, upper-case (`HEAD`, or a method no route has): for metrics and logs. */
  readonly sentMethod: string;
  /** As routed: HEAD is answered as GET. */
  readonly method: Method;
  readonly path: string;
  readonly listener: Listener;
  readonly queryString: string;
  readonly authorization: string;
  readonly contentType: string;
  /** The client's X-Request-Id when usable, else one of ours; echoed in the answer, on every log line of the request. */
  readonly requestId: string;
  /** The Host the client reached (for the API description's servers). */
  readonly host: string;
  readonly forwardedProto: string;
  readonly forwardedHost: string;
  readonly accept: string;
  /** A HEAD request: the headers (and length) of the GET, without the body. */
  readonly head: boolean;
  readonly match: Match;
  readonly params: Record<string, string>;
  /** The body as it arrives (routes with a body): started at once, awaited by `readJson`. */
  readonly rawBody: Promise<Buffer> | undefined;
  values: QueryValues = NO_VALUES;
  queryFailure: QueryFailure | undefined = undefined;
  body: unknown = undefined;
  bodyError: ApiError | undefined = undefined;
  claims: Claims | undefined = undefined;
  tenant = '';
  /** The client went away: nothing may be written. */
  aborted = false;
  /** Called when the client goes away (streamed answers stop their producer). */
  readonly abortListeners: (() => void)[] = [];
  answered = false;
  /** The status written (a request cut off by shutdown was answered 503 before its handler ended). */
  answeredStatus = 0;
  private log: Logger | undefined;

  constructor(
    private readonly site: Site,
    readonly res: uWS.HttpResponse,
    req: uWS.HttpRequest,
  ) {
    this.sentMethod = req.getMethod().toUpperCase();
    this.path = req.getUrl();
    this.listener = site.listener;
    this.queryString = req.getQuery() ?? '';
    this.authorization = req.getHeader('authorization');
    this.contentType = req.getHeader('content-type');
    this.requestId = requestIdFor(req.getHeader('x-request-id'));
    this.host = req.getHeader('host');
    this.forwardedProto = req.getHeader('x-forwarded-proto');
    this.forwardedHost = req.getHeader('x-forwarded-host');
    this.head = this.sentMethod === 'HEAD';
    this.method = (this.head ? 'GET' : this.sentMethod) as Method;
    res.onAborted(() => {
      this.aborted = true;
      for (const fn of this.abortListeners.splice(0)) fn();
    });
    this.match = site.router.match(this.method, this.path);
    this.params = this.match.kind === 'route' ? this.match.params : NO_PARAMS;
    this.accept = this.match.kind === 'route' && this.match.endpoint.route.negotiates ? acceptOf(req) : req.getHeader('accept');
    this.rawBody =
      this.match.kind === 'route' && this.match.endpoint.route.body
        ? readBody(res, site.maxBodyBytes, (fn) => this.abortListeners.push(fn))
        : undefined;
    // The body may fail (413, or the client gone) while the token is still being checked: mark it handled here;
    // `readJson` awaits it and answers the error.
    this.rawBody?.catch(() => undefined);
  }

  /** The logger of this request: every line carries its id (made when first needed). */
  logger(): Logger {
    return (this.log ??= this.site.log.child({ requestId: this.requestId }));
  }
}

/** Runs the steps, writes the answer (or the error's), counts it. */
async function answer(site: Site, ex: Exchange): Promise<void> {
  let reply: Reply;
  try {
    reply = await handle(site, ex);
  } catch (err) {
    // Gone before its whole body came: no handler ran, no answer can be written.
    if (err instanceof BodyAborted) return;
    reply = errorReply(err, ex);
  }
  const status = reply.stream && !ex.head ? await sendStream(ex, reply, reply.stream) : send(ex, reply, site.inFlight.draining);
  const seconds = (performance.now() - ex.started) / 1000;
  site.metrics.observeHttp(KNOWN_METHODS.has(ex.sentMethod) ? ex.sentMethod : 'OTHER', metricRoute(ex.match), status, seconds);
  if (site.log.level === 'debug')
    ex.logger().debug('request', { method: ex.sentMethod, path: ex.path, status, ms: Math.round(seconds * 1000) });
}

async function handle(site: Site, ex: Exchange): Promise<Reply> {
  await authenticate(ex, site.tokens);
  const endpoint = endpointOf(ex.match);
  if (endpoint.route.body) await readJson(ex, endpoint.route.body);
  checkQuery(ex, endpoint);
  return endpoint.route.handler(ex);
}

/** `Authorization: Bearer <token>`, verified; except on the routes with `auth: false`. */
async function authenticate(ex: Exchange, tokens: Tokens): Promise<void> {
  if (ex.match.kind === 'route' && ex.match.endpoint.route.auth === false) return;
  if (!ex.authorization) throw errors.noToken();
  // Exactly `Bearer <token>`: anything after the token makes the header malformed.
  const token = bearerTokenOf(ex.authorization);
  if (!token) throw errors.invalidToken();
  const claims = await tokens.verify(token);
  if (!claims) throw errors.invalidToken();
  ex.claims = claims;
  ex.tenant = claims.service;
}

/** The route found: an unknown path is 404, a known path with another method 405. */
function endpointOf(match: Match): Endpoint {
  if (match.kind === 'none') throw errors.invalidEndpoint();
  if (match.kind === 'method') throw errors.methodNotAllowed(match.allowed);
  return match.endpoint;
}

/** The body as JSON; a bad one answers 400, or reaches a `json-deferred` handler as `bodyError`. */
async function readJson(ex: Exchange, decl: BodyDecl): Promise<void> {
  const raw = await ex.rawBody!;
  try {
    ex.body = parseJson(raw, ex.contentType, decl.notJson ?? errors.payloadNotJson);
  } catch (err) {
    if (decl.read !== 'json-deferred') throw err;
    ex.bodyError = err as ApiError;
  }
}

/** The query against the route's schema: typed values, or its failure (answered now unless the handler orders it). */
function checkQuery(ex: Exchange, endpoint: Endpoint): void {
  if (!endpoint.query) return;
  const checked = endpoint.query.run(new URLSearchParams(ex.queryString));
  ex.values = checked.values;
  ex.queryFailure = checked.failure;
  if (checked.failure && endpoint.route.queryFailure !== 'handler') throw checked.failure.error;
}

const metricRoute = (match: Match) =>
  match.kind === 'route' ? match.endpoint.route.path : match.kind === 'method' ? '<method-not-allowed>' : '<unmatched>';

/**
 * A streamed answer: status and headers with the first chunk, then the body as the producer
 * writes it, each chunk corked; `write` returning false is uWS's backpressure, and `drained`
 * waits for `onWritable`. A producer failing before its first chunk (no pool connection, the
 * statement refused) is answered as any failing request (503, 500), not as a 200 whose body
 * the connection's close makes look complete and empty. Failing after the headers went out it
 * cannot change the status: the connection is closed, so the client sees a truncated (chunked)
 * body rather than a complete-looking one.
 */
async function sendStream(ex: Exchange, reply: Reply, produce: (out: StreamOut) => Promise<void>): Promise<number> {
  if (ex.answered) return ex.answeredStatus;
  if (ex.aborted) return reply.status;
  // Answered from now on (shutdown does not cut a stream off; closing its connection ends it).
  ex.answered = true;
  ex.answeredStatus = reply.status;
  const { res } = ex;
  let started = false;
  /** Status and headers, once (inside a cork). */
  const start = () => {
    if (started) return;
    started = true;
    writeHead(ex, reply);
    res.writeHeader('Content-Type', reply.contentType ?? 'application/octet-stream');
  };
  let wake: (() => void) | undefined;
  ex.abortListeners.push(() => wake?.());
  const out: StreamOut = {
    write(chunk) {
      if (ex.aborted) return false;
      return writeChunked(res, chunk, start);
    },
    drained() {
      if (ex.aborted) return Promise.resolve();
      return new Promise<void>((resolve) => {
        wake = resolve;
        res.onWritable(() => {
          wake = undefined;
          resolve();
          return true;
        });
      });
    },
    get aborted() {
      return ex.aborted;
    },
    onAbort(fn) {
      if (ex.aborted) fn();
      else ex.abortListeners.push(fn);
    },
  };
  try {
    await produce(out);
    if (!ex.aborted)
      res.cork(() => {
        start();
        res.end();
      });
  } catch (err) {
    if (!started && !ex.aborted) {
      // Nothing sent yet: the error's own answer.
      ex.answered = false;
      return send(ex, errorReply(err, ex));
    }
    if (!ex.aborted) {
      ex.logger().error('streamed answer failed', {
        method: ex.sentMethod,
        path: ex.path,
        error: err instanceof Error ? err : String(err),
      });
      res.close();
    }
  }
  return reply.status;
}

/**
 * Writes the reply unless the client is gone or it was answered already (cut off by shutdown);
 * returns the status for the metrics. `closing`: the connection closes after it (shutdown).
 */
function send(ex: Exchange, reply: Reply, closing = false): number {
  if (ex.answered) return ex.answeredStatus;
  if (ex.aborted) return reply.status;
  ex.answered = true;
  ex.answeredStatus = reply.status;
  const { res } = ex;
  const payload = reply.raw ?? (reply.body === undefined ? undefined : JSON.stringify(reply.body));
  // A 413 is answered before the body was read: close the connection so the rest is not parsed as a request.
  const close = closing || reply.status === 413;
  res.cork(() => {
    writeHead(ex, reply);
    if (payload === undefined) {
      // A streamed answer asked with HEAD: the GET's media type, no length (it is not known).
      if (reply.contentType) res.writeHeader('Content-Type', reply.contentType);
      // No arguments: an explicit `undefined` length is sent as Content-Length 2^63, which
      // breaks the client's keep-alive connection; with none, a 204 carries no length at all.
      // (So a 204 does not close its connection during shutdown: it is closed once idle.)
      res.endWithoutBody();
    } else if (ex.head) {
      // HEAD: the length the GET would have, and no body (RFC 9110 §9.3.2).
      res.writeHeader('Content-Type', reply.contentType ?? 'application/json');
      res.endWithoutBody(Buffer.byteLength(payload), close);
    } else {
      res.writeHeader('Content-Type', reply.contentType ?? 'application/json');
      res.end(payload, close);
    }
  });
  return reply.status;
}

/** The status line, the request's id and the reply's own headers (inside the caller's cork). */
function writeHead(ex: Exchange, reply: Reply): void {
  ex.res.writeStatus(statusLine(reply.status));
  ex.res.writeHeader('X-Request-Id', ex.requestId);
  if (reply.headers) for (const [k, v] of Object.entries(reply.headers)) ex.res.writeHeader(k, v);
}

function errorReply(err: unknown, ex: Exchange): Reply {
  if (err instanceof ApiError) return { status: err.httpStatus, body: err.body, headers: err.headers };
  // Answered already (cut off by shutdown): what became of it afterwards is no failure to report.
  if (ex.answered) return { status: 503 };
  if (isDatabaseUnavailable(err)) {
    // Not a bug: the database is down, restarting or out of connections; the client may retry.
    ex.logger().warn('request failed: database unavailable', { method: ex.sentMethod, path: ex.path, error: (err as Error).message });
    const e = errors.unhealthy();
    return { status: e.httpStatus, body: e.body };
  }
  ex.logger().error('request failed', { method: ex.sentMethod, path: ex.path, error: err instanceof Error ? err : String(err) });
  const e = errors.internal();
  return { status: e.httpStatus, body: e.body };
}

/** Requests in flight, so that `close` can wait for them (and answer those left at its deadline). */
class InFlight {
  private readonly running = new Set<Exchange>();
  private idle: (() => void) | undefined;
  /** performance.now() of the last request that began or ended. */
  private lastActivity = 0;
  /** Shutdown began: every answer closes its connection. */
  draining = false;

  begin(ex: Exchange): void {
    this.running.add(ex);
    this.lastActivity = performance.now();
  }

  end(ex: Exchange): void {
    this.running.delete(ex);
    this.lastActivity = performance.now();
    if (this.running.size === 0 && this.idle) this.idle();
  }

  /** Resolves when none is left, or at `until` (epoch ms). */
  drained(until: number): Promise<void> {
    if (this.running.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, Math.max(0, until - Date.now()));
      this.idle = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Resolves once nothing is running and nothing began or ended for `quietMs`, or at `until` (epoch ms). */
  async quiet(until: number, quietMs: number): Promise<void> {
    for (;;) {
      await this.drained(until);
      const left = until - Date.now();
      const wait = this.lastActivity + quietMs - performance.now();
      if (left <= 0 || (this.running.size === 0 && wait <= 0)) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(Math.max(wait, 1), left)));
    }
  }

  /** The requests still running and not yet answered. */
  cutOff(): Exchange[] {
    return [...this.running].filter((ex) => !ex.answered && !ex.aborted);
  }
}
