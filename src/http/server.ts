// The uWebSockets.js adapter: two listeners (public and internal), each with its own routes.
// Per request: read everything needed from `req` synchronously (it dies after the handler
// returns), start reading the body at once, check the token (before routing, so unknown routes
// answer 401 too), route, validate (the body as JSON, the query against its operation's schema:
// src/openapi/routes.ts), call the handler, and write the reply corked, unless the client went away.
import uWS from 'uWebSockets.js';
import { isDatabaseUnavailable } from '../db/pool.js';
import { ApiError, errors } from '../errors.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import type { Tokens } from '../auth/tokens.js';
import type { QueryCheck, QueryFailure, QueryValues } from '../schemas/validator.js';
import { Router } from './router.js';
import type { Claims, Listener, Method, Reply, Request, Route } from './types.js';

/** uWS's LIBUS_LISTEN_EXCLUSIVE_PORT (exported at runtime, missing from its types). */
const LISTEN_EXCLUSIVE_PORT = (uWS as unknown as { LIBUS_LISTEN_EXCLUSIVE_PORT: number }).LIBUS_LISTEN_EXCLUSIVE_PORT;

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK', 201: '201 Created', 204: '204 No Content', 400: '400 Bad Request', 401: '401 Unauthorized',
  403: '403 Forbidden', 404: '404 Not Found', 405: '405 Method Not Allowed', 409: '409 Conflict',
  413: '413 Payload Too Large', 500: '500 Internal Server Error', 503: '503 Service Unavailable',
};
const KNOWN_METHODS = new Set(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS']);
const NO_VALUES: QueryValues = Object.freeze({});
const JSON_TYPE = /^application\/json\s*(;|$)/i;
/** Request bodies must be UTF-8 (RFC 8259 §8.1): anything else is 400, never stored with U+FFFD. A leading BOM is ignored. */
const utf8 = new TextDecoder('utf-8', { fatal: true });

export interface HttpOptions {
  publicHost: string;
  publicPort: number;
  internalHost: string;
  internalPort: number;
  maxBodyBytes: number;
  routes: Route[];
  /** The compiled query schema of each route that has one (src/openapi/routes.ts `queryChecks`). */
  queries: ReadonlyMap<Route, QueryCheck>;
  tokens: Tokens;
  metrics: Metrics;
  log: Logger;
}

export interface HttpServer {
  publicPort: number;
  internalPort: number;
  /** Stops accepting connections, waits for requests in flight (up to `timeoutMs`). */
  close(timeoutMs: number): Promise<void>;
}

interface Exchange {
  res: uWS.HttpResponse;
  aborted: boolean;
  answered: boolean;
  /** A HEAD request: answered as GET, with the headers (and length) only. */
  head: boolean;
}

export async function startHttp(opts: HttpOptions): Promise<HttpServer> {
  const { log } = opts;
  let inFlight = 0;
  let idle: (() => void) | undefined;
  const finished = () => {
    inFlight--;
    if (inFlight === 0 && idle) idle();
  };

  const listen = (listener: Listener, host: string, port: number) => {
    const router = new Router();
    for (const r of opts.routes) if ((r.listener ?? 'public') === listener) router.add(r);
    const app = uWS.App();
    app.any('/*', (res, req) => {
      const started = performance.now();
      const method = req.getMethod().toUpperCase();
      const path = req.getUrl();
      const queryString = req.getQuery() ?? '';
      const authorization = req.getHeader('authorization');
      const contentType = req.getHeader('content-type');
      const head = method === 'HEAD';
      const ex: Exchange = { res, aborted: false, answered: false, head };
      res.onAborted(() => {
        ex.aborted = true;
      });
      inFlight++;
      const match = router.match(head ? 'GET' : method, path);
      const route = match.kind === 'route' ? match.route : undefined;
      const body = route?.body !== undefined ? readBody(res, opts.maxBodyBytes) : undefined;
      // The body may fail (413) while the token is still being checked: mark it handled here;
      // `handle` awaits it and answers the error.
      body?.catch(() => undefined);
      const metricRoute = route ? route.path : match.kind === 'method' ? '<method-not-allowed>' : '<unmatched>';
      handle(listener, head ? 'GET' : method, path, queryString, authorization, contentType, match, body)
        .then(
          (reply) => send(ex, reply),
          (err: unknown) => send(ex, errorReply(err, log, method, path)),
        )
        .then((status) => {
          opts.metrics.observeHttp(KNOWN_METHODS.has(method) ? method : 'OTHER', metricRoute, status, (performance.now() - started) / 1000);
        })
        .finally(finished);
    });

    return new Promise<{ socket: uWS.us_listen_socket; port: number }>((resolve, reject) => {
      // Exclusive: uWS otherwise binds with SO_REUSEPORT, and a second instance given the same
      // port would share it silently, splitting the requests between the two.
      const listenExclusive = app.listen as unknown as (h: string, p: number, o: number, cb: (s: uWS.us_listen_socket | false) => void) => void;
      listenExclusive.call(app, host, port, LISTEN_EXCLUSIVE_PORT, (socket) => {
        if (!socket) {
          reject(new Error(`cannot listen on ${host}:${port} (${listener === 'public' ? 'PORT/HOST' : 'INTERNAL_PORT/INTERNAL_HOST'}); is the port taken?`));
          return;
        }
        resolve({ socket, port: uWS.us_socket_local_port(socket as unknown as uWS.us_socket) });
      });
    });
  };

  async function handle(
    listener: Listener,
    method: string,
    path: string,
    queryString: string,
    authorization: string,
    contentType: string,
    match: ReturnType<Router['match']>,
    body: Promise<Buffer> | undefined,
  ): Promise<Reply> {
    const route = match.kind === 'route' ? match.route : undefined;
    let claims: Claims | undefined;
    if (route?.auth !== false) {
      if (!authorization) throw errors.noToken();
      // Exactly `Bearer <token>`: anything after the token makes the header malformed.
      const token = /^Bearer (\S+)$/.exec(authorization.trim())?.[1];
      if (!token) throw errors.invalidToken();
      claims = await opts.tokens.verify(token);
      if (!claims) throw errors.invalidToken();
    }
    if (match.kind === 'none') throw errors.invalidEndpoint();
    if (match.kind === 'method') throw errors.methodNotAllowed(match.allowed);
    const r = match.route;
    let parsed: unknown;
    let bodyError: ApiError | undefined;
    if (body) {
      const raw = await body;
      const bad = r.badBody ?? errors.payloadNotJson;
      try {
        if (!JSON_TYPE.test(contentType)) throw bad();
        let text: string;
        try {
          text = utf8.decode(raw);
          parsed = JSON.parse(text);
        } catch {
          throw bad();
        }
        if (!wellFormed(text, parsed)) throw bad();
      } catch (err) {
        if (r.body !== 'json-deferred') throw err;
        bodyError = err as ApiError;
      }
    }
    const query = new URLSearchParams(queryString);
    let values = NO_VALUES;
    let queryFailure: QueryFailure | undefined;
    const queryCheck = opts.queries.get(r);
    if (queryCheck) {
      const checked = queryCheck.run(query);
      values = checked.values;
      queryFailure = checked.failure;
      if (queryFailure && r.queryFailure !== 'handler') throw queryFailure.error;
    }
    const request: Request = {
      method: method as Method,
      path,
      route: r.path,
      params: match.params,
      query,
      values,
      ...(queryFailure ? { queryFailure } : {}),
      body: parsed,
      ...(bodyError ? { bodyError } : {}),
      claims,
      tenant: claims?.service ?? '',
      listener,
    };
    return r.handler(request);
  }

  /** Writes the reply unless the client is gone; returns the status for the metrics. */
  function send(ex: Exchange, reply: Reply): number {
    if (ex.aborted || ex.answered) return reply.status;
    ex.answered = true;
    const { res } = ex;
    const payload = reply.raw ?? (reply.body === undefined ? undefined : JSON.stringify(reply.body));
    // A 413 is answered before the body was read: close the connection so the rest is not parsed as a request.
    const close = reply.status === 413;
    res.cork(() => {
      res.writeStatus(STATUS_TEXT[reply.status] ?? String(reply.status));
      if (reply.headers) for (const [k, v] of Object.entries(reply.headers)) res.writeHeader(k, v);
      if (payload === undefined) {
        // No arguments: an explicit `undefined` length is sent as Content-Length 2^63, which
        // breaks the client's keep-alive connection; with none, a 204 carries no length at all.
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

  const pub = await listen('public', opts.publicHost, opts.publicPort);
  const internal = await listen('internal', opts.internalHost, opts.internalPort).catch((err) => {
    uWS.us_listen_socket_close(pub.socket);
    throw err;
  });
  log.info('public HTTP API listening', { address: `http://${opts.publicHost}:${pub.port}` });
  log.info('internal HTTP API listening', { address: `http://${opts.internalHost}:${internal.port}` });

  return {
    publicPort: pub.port,
    internalPort: internal.port,
    close(timeoutMs) {
      uWS.us_listen_socket_close(pub.socket);
      uWS.us_listen_socket_close(internal.socket);
      if (inFlight === 0) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        idle = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    },
  };
}

/** A `\uD800`-`\uDFFF` escape: the only way JSON text decoded from UTF-8 can carry a lone surrogate. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * False when a string or key of the parsed body holds a lone surrogate (`"\ud800"`): such text
 * is not Unicode; PostgreSQL would store it as U+FFFD while caches kept the original, so the
 * body is refused like any other that is not valid JSON text. Walked only when an escape is there.
 */
function wellFormed(text: string, value: unknown): boolean {
  if (!SURROGATE_ESCAPE.test(text)) return true;
  // A stack, not recursion: a body may nest as deep as JSON.parse allows.
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const v = pending.pop();
    if (typeof v === 'string') {
      if (LONE_SURROGATE.test(v)) return false;
    } else if (Array.isArray(v)) {
      pending.push(...v);
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        if (LONE_SURROGATE.test(k)) return false;
        pending.push(x);
      }
    }
  }
  return true;
}

/**
 * Collects the request body, copying each chunk (uWS reuses them). Past `limit` bytes the
 * promise rejects with 413 at once; the connection is closed when the 413 is written.
 */
function readBody(res: uWS.HttpResponse, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    res.onData((chunk, isLast) => {
      if (over) return;
      size += chunk.byteLength;
      if (size > limit) {
        over = true;
        reject(errors.bodyTooLarge(limit));
        return;
      }
      chunks.push(Buffer.from(chunk.slice(0)));
      if (isLast) resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    });
  });
}

function errorReply(err: unknown, log: Logger, method: string, path: string): Reply {
  if (err instanceof ApiError) return { status: err.httpStatus, body: err.body, headers: err.headers };
  if (isDatabaseUnavailable(err)) {
    // Not a bug: the database is down, restarting or out of connections; the client may retry.
    log.warn('request failed: database unavailable', { method, path, error: (err as Error).message });
    const e = errors.unhealthy();
    return { status: e.httpStatus, body: e.body };
  }
  log.error('request failed', { method, path, error: err instanceof Error ? err : String(err) });
  const e = errors.internal();
  return { status: e.httpStatus, body: e.body };
}
