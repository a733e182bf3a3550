// Path routing with `:param` segments. Static segments win over parameters, so
// `/device/template/:id` and `/device/:id` coexist.
import type { QueryCheck } from '../schemas/validator.js';
import type { Method, Route } from './types.js';

/** A route as one listener serves it: with its compiled query check (src/http/route.ts `queryChecks`). */
export interface Endpoint {
  route: Route;
  query: QueryCheck | undefined;
}

interface Node {
  statics: Map<string, Node>;
  param: { name: string; node: Node } | undefined;
  routes: Map<Method, Endpoint>;
}

const node = (): Node => ({ statics: new Map(), param: undefined, routes: new Map() });

export type Match =
  { kind: 'route'; endpoint: Endpoint; params: Record<string, string> } | { kind: 'method'; allowed: string[] } | { kind: 'none' };

export class Router {
  private readonly root = node();

  add(route: Route, query: QueryCheck | undefined): void {
    let n = this.root;
    for (const seg of split(route.path)) {
      if (seg.startsWith(':')) {
        const name = seg.slice(1);
        if (n.param && n.param.name !== name) throw new Error(`route ${route.path}: parameter :${name} clashes with :${n.param.name}`);
        n.param ??= { name, node: node() };
        n = n.param.node;
      } else {
        let next = n.statics.get(seg);
        if (!next) n.statics.set(seg, (next = node()));
        n = next;
      }
    }
    if (n.routes.has(route.method)) throw new Error(`route ${route.method} ${route.path} registered twice`);
    n.routes.set(route.method, { route, query });
  }

  match(method: string, path: string): Match {
    // An empty segment names no route (`/device//x`; `DELETE /device/`: were it skipped, a client
    // building `/device/${id}` with an empty id would remove every device), except a trailing
    // slash on a read (GET, HEAD: a browser's `/live/`).
    const inner = method === 'GET' || method === 'HEAD' ? path.slice(1, path.endsWith('/') ? -1 : undefined) : path.slice(1);
    if (path !== '/' && inner.split('/').includes('')) return { kind: 'none' };
    const segs = split(path);
    const params: Record<string, string> = {};
    const found = walk(this.root, segs, 0, params);
    if (!found) return { kind: 'none' };
    const endpoint = found.routes.get(method as Method);
    if (endpoint) return { kind: 'route', endpoint, params };
    // A GET route answers HEAD too (src/http/server.ts): the Allow header says so (RFC 9110 §10.2.1).
    return { kind: 'method', allowed: [...found.routes.keys()].flatMap((m) => (m === 'GET' ? ['GET', 'HEAD'] : [m])) };
  }
}

function split(path: string): string[] {
  return path.split('/').filter((s) => s.length > 0);
}

function walk(n: Node, segs: string[], i: number, params: Record<string, string>): Node | undefined {
  if (i === segs.length) return n.routes.size > 0 ? n : undefined;
  const seg = segs[i]!;
  const s = n.statics.get(seg);
  if (s) {
    const hit = walk(s, segs, i + 1, params);
    if (hit) return hit;
  }
  if (n.param) {
    let value: string;
    try {
      value = decodeURIComponent(seg);
    } catch {
      value = seg;
    }
    const hit = walk(n.param.node, segs, i + 1, params);
    if (hit) {
      params[n.param.name] = value;
      return hit;
    }
  }
  return undefined;
}
