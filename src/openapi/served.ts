// The document as GET /openapi.json serves it: its servers are the addresses the client reached
// (the listener it asked, from `Host`, or `X-Forwarded-Host`/`-Proto` behind a proxy) and the
// other listener on the same host name (or at its own address when it is bound to one). The
// text is made once, with markers for the two URLs, and filled in per pair of URLs (cached).
import type { Listener } from '../http/types.js';
import { openApiText, type DocumentLimits, type ServerUrls } from './document.js';
import type { RouteDecl } from '../http/types.js';

const MARK: ServerUrls = { public: 'http://server.public.marker', internal: 'http://server.internal.marker' };
/** Distinct URL pairs kept; beyond, texts are made and not kept (the Host header is the client's). */
const CACHE_SIZE = 64;

/** Where a listener is bound, and on which port (the real one, when configured as 0). */
export interface ListenerAddress {
  host: string;
  port: number;
}

/** What the client sent that says where it reached the service. */
export interface Reached {
  listener: Listener;
  host: string;
  forwardedHost: string;
  forwardedProto: string;
}

// A name of RFC 3986's unreserved characters (so `_` and `~` too: Compose names services and
// containers such as `stack_registry_1`; before, found by an audit, such a Host was not used and
// the document named localhost), or a bracketed IPv6 address; then an optional port.
const HOST = /^(?:[A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(?::(\d{1,5}))?$/;
/**
 * A host name or address, with a port a client can have reached (1-65535) if any, that makes a
 * URL (WHATWG): not `999.1.1.1`, `1.2.3.4.5` or `[1.2.3.4]`, which the pattern lets through
 * (before, found by an audit, such a Host was served as the server's URL, which no client parses).
 */
const usable = (authority: string) => {
  const m = HOST.exec(authority);
  return m !== null && (m[1] === undefined || (Number(m[1]) >= 1 && Number(m[1]) <= 65535)) && URL.canParse(`http://${authority}`);
};
const WILDCARD = new Set(['0.0.0.0', '::', '[::]', '']);

const hostPart = (authority: string) =>
  authority.startsWith('[') ? authority.slice(0, authority.indexOf(']') + 1) : authority.split(':')[0]!;
const literal = (host: string) => (host.includes(':') && !host.startsWith('[') ? `[${host}]` : host);
/** The first value of a comma-separated forwarded header. */
const first = (value: string) => value.split(',')[0]!.trim();

/** The base URL of each listener, as seen by a client that reached `reached`. */
export function serverUrls(reached: Reached, listeners: Record<Listener, ListenerAddress>): ServerUrls {
  const own = listeners[reached.listener];
  const forwarded = first(reached.forwardedHost);
  // Without a usable Host, the listener's own address; bound to every address, `localhost` (as the static document).
  const ownHost = WILDCARD.has(own.host) ? 'localhost' : literal(own.host);
  const authority = usable(forwarded) ? forwarded : usable(reached.host) ? reached.host : `${ownHost}:${own.port}`;
  const proto = first(reached.forwardedProto).toLowerCase();
  const reachedUrl = `${proto === 'https' ? 'https' : 'http'}://${authority}`;
  const otherListener: Listener = reached.listener === 'public' ? 'internal' : 'public';
  const other = listeners[otherListener];
  const otherHost = WILDCARD.has(other.host) ? hostPart(authority) : literal(other.host);
  const otherUrl = `http://${otherHost}:${other.port}`;
  return reached.listener === 'public' ? { public: reachedUrl, internal: otherUrl } : { public: otherUrl, internal: reachedUrl };
}

export class ServedOpenApi {
  private readonly template: string;
  private readonly texts = new Map<string, string>();
  private listeners: Record<Listener, ListenerAddress> | undefined;

  constructor(routes: readonly RouteDecl[], limits: DocumentLimits) {
    this.template = openApiText(routes, limits, MARK);
  }

  /** The listeners' addresses, known once they listen. */
  listening(listeners: Record<Listener, ListenerAddress>): void {
    this.listeners = listeners;
  }

  text(reached: Reached): string {
    if (!this.listeners) throw new Error('the listeners are not known yet');
    const urls = serverUrls(reached, this.listeners);
    const key = `${urls.public} ${urls.internal}`;
    let text = this.texts.get(key);
    if (text === undefined) {
      // JSON.stringify: the URLs are JSON strings in the document.
      text = this.template
        .split(JSON.stringify(MARK.public))
        .join(JSON.stringify(urls.public))
        .split(JSON.stringify(MARK.internal))
        .join(JSON.stringify(urls.internal));
      if (this.texts.size < CACHE_SIZE) this.texts.set(key, text);
    }
    return text;
  }
}
