// GET /stream as the API description shows it. It is served by the live hub's own uWS handlers
// (src/live/stream.ts: the WebSocket upgrade, and Server-Sent Events), registered before the
// routes; this declaration documents it, and answers a HEAD. And GET /live, the page (docs/live.md
// §5), an ordinary route: public, since the page logs in with POST /auth like any client.
import { errors } from '../errors.js';
import { notAcceptable } from '../http/accept.js';
import type { RouteSpec } from '../http/types.js';
import { LIVE_PAGE } from './page.js';

const filter = (what: string) => ({
  type: 'array',
  items: { type: 'string' },
  description: `${what} Repeatable, or comma-separated; absent: no filter on it.`,
});

export const liveRoutes: RouteSpec<object>[] = [
  {
    method: 'GET',
    path: '/stream',
    summary: 'Live stream of committed telemetry, registry changes and device status',
    description:
      "The tenant's changes as they happen (docs/live.md). **WebSocket**: `GET /stream` with `Upgrade: websocket`; the token in " +
      '`Authorization: Bearer <token>`, in `?token=`, or (browsers) as the subprotocol `bearer.<token>` offered beside ' +
      '`device-registry.live.v1`. Each message is one JSON object; a client changes its filters by sending ' +
      '`{"type":"subscribe","devices":[..],"templates":[..],"attrs":[..]}`. **Server-Sent Events**: the same request with ' +
      '`Accept: text/event-stream`; each message is one `data:` line. Messages: `subscribed`, `attrs` (after commit), `device`, ' +
      '`template`, `credential`, `tenant`, `status`, `lagged` (messages dropped for a slow client), `error`. An expired token ' +
      'ends the stream: WebSocket close code 4001 `token expired`; SSE an event `closed`, then the end of the answer.',
    tag: 'live',
    query: () => ({
      type: 'object',
      properties: {
        device: filter('Only these device ids.'),
        template: filter('Only devices built from these template ids.'),
        attr: filter('Only these attribute labels in `attrs` messages (a message without any of them is not sent).'),
        token: { type: 'string', description: 'The token, for clients that cannot set a header.' },
        max_messages: {
          type: 'integer',
          minimum: 1,
          description:
            'End the stream after this many messages sent (the first is `subscribed`; messages dropped for a slow client do not count, its `lagged` does and comes before the end): WebSocket close 1000, SSE a `closed` event.',
        },
      },
    }),
    responses: {
      101: { description: 'WebSocket upgrade (`Upgrade: websocket`).' },
      200: {
        description: 'Server-Sent Events (`Accept: text/event-stream`): one `data:` line of JSON per message.',
        contentType: 'text/event-stream',
        schema: { type: 'string' },
      },
      400: {
        description:
          'A bad filter or max_messages (or an unknown query parameter), neither a WebSocket upgrade nor `Accept: text/event-stream`, ' +
          'or a WebSocket that offers subprotocols without `device-registry.live.v1`.',
        errors: ['badQuery', 'notAStream', 'streamSubprotocol'],
      },
      429: {
        description: 'The tenant has `LIVE_MAX_CLIENTS_PER_TENANT` streams (WebSocket and SSE together) open on this instance.',
        errors: ['tooManyStreams'],
      },
      // Its own text (before, found by an audit, only the other routes' drain answer was declared).
      503: { description: 'The service is shutting down: no new stream.', errors: ['streamShuttingDown'] },
    },
    examples: [
      {
        name: 'sse',
        summary: 'Server-Sent Events, ended after the first message',
        query: { max_messages: 1 },
        headers: { Accept: 'text/event-stream' },
        status: 200,
        // As served, its opening comment line included (an SSE client skips it).
        response:
          ': device-registry live stream\n\ndata: {"type":"subscribed","devices":null,"templates":null,"attrs":null}\n\nevent: closed\ndata: {"type":"closed","reason":"max_messages reached"}\n\n',
      },
      {
        name: 'notAStream',
        summary: 'A plain GET: neither a WebSocket upgrade nor Accept: text/event-stream',
        status: 400,
        response: errors.notAStream().body,
      },
      {
        name: 'badTemplate',
        summary: 'A template filter that is no template id',
        query: { template: 'abc' },
        headers: { Accept: 'text/event-stream' },
        status: 400,
        response: { message: 'templates must be template ids, got "abc"', status: 400 },
      },
    ],
    handler() {
      throw errors.notAStream();
    },
  },
  {
    method: 'GET',
    path: '/live',
    negotiates: true,
    auth: false,
    summary: 'A page that shows the live stream',
    description:
      "Plain HTML and JavaScript: it logs in with `POST /auth`, lists the tenant's devices with their status, and shows the chosen " +
      "device's attributes as messages arrive (`GET /stream`), with a chart of a numeric attribute's last minutes.",
    tag: 'live',
    responses: {
      200: { description: 'The page.', contentType: 'text/html', schema: { type: 'string' } },
      406: { description: 'The client accepts no `text/html` (`Accept`).', errors: ['notAcceptable'] },
    },
    examples: [
      { name: 'page', summary: 'The page (its beginning)', status: 200, response: '<!doctype html>…' },
      {
        name: 'notHtml',
        summary: 'A client that accepts JSON only',
        headers: { accept: 'application/json' },
        status: 406,
        response: errors.notAcceptable('text/html').body,
      },
    ],
    handler(req) {
      return (
        notAcceptable(req.accept, 'text/html') ?? {
          status: 200,
          raw: LIVE_PAGE,
          contentType: 'text/html; charset=utf-8',
          headers: { 'Cache-Control': 'no-cache' },
        }
      );
    },
  },
];
