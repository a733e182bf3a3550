// `Accept` (RFC 9110 §12.5.1), for the operations routes, which answer one media type each: a
// client that sends Accept and allows neither that type, its `type/*`, nor `*/*` gets 406; the most
// specific of those it names decides (`application/json;q=0, */*` refuses JSON).
import type uWS from 'uWebSockets.js';
import { errors } from '../errors.js';
import type { Reply } from './types.js';

/**
 * The request's `Accept`, every line of it: a client may send the field on several lines, which
 * mean what one line of their values joined by commas means (RFC 9110 §5.3), and uWebSockets.js's
 * `getHeader` gives the first line only (before, found by an audit, `Accept: text/html` then
 * `Accept: application/json` was a 406, and a stream request naming `text/event-stream` on its
 * second line a 400).
 */
export function acceptOf(req: uWS.HttpRequest): string {
  let value: string | undefined;
  req.forEach((key, v) => {
    if (key === 'accept') value = value === undefined ? v : `${value}, ${v}`;
  });
  return value ?? '';
}

export function accepts(header: string, mediaType: string): boolean {
  if (header.trim() === '') return true;
  const [type] = mediaType.split('/');
  // The most specific range that matches decides (RFC 9110 §12.5.1): `application/json;q=0, */*`
  // refuses JSON although `*/*` allows anything.
  let best: { specificity: number; q: number } | undefined;
  for (const range of header.split(',')) {
    const [name, ...params] = range.split(';').map((s) => s.trim().toLowerCase());
    const specificity = name === mediaType ? 3 : name === `${type}/*` ? 2 : name === '*/*' ? 1 : 0;
    if (specificity === 0) continue;
    const q = params.find((p) => p.startsWith('q='));
    const weight = q === undefined ? 1 : Number(q.slice(2));
    if (best === undefined || specificity > best.specificity) best = { specificity, q: weight };
  }
  return best !== undefined && best.q > 0;
}

/**
 * Whether `header` names `mediaType` itself (not through `type/*` or `*` + `/*`) with a weight
 * above 0: media types are case-insensitive and may carry parameters (RFC 9110 §8.3.1), and
 * `q=0` refuses the type (§12.4.2). For an answer only given to a client that asks for it by
 * name, as `GET /stream`'s Server-Sent Events (docs/live.md §2). A type named twice: the first
 * naming decides, as in `accepts` (before, found by a review, the last one did here).
 */
export function names(header: string, mediaType: string): boolean {
  let q: number | undefined;
  for (const range of header.split(',')) {
    const [name, ...params] = range.split(';').map((s) => s.trim().toLowerCase());
    if (name !== mediaType || q !== undefined) continue;
    const weight = params.find((p) => p.startsWith('q='));
    q = weight === undefined ? 1 : Number(weight.slice(2));
  }
  return q !== undefined && q > 0;
}

/** The 406 answer when `accept` excludes `mediaType`, else undefined. */
export function notAcceptable(accept: string, mediaType: string): Reply | undefined {
  if (accepts(accept, mediaType)) return undefined;
  const e = errors.notAcceptable(mediaType);
  return { status: e.httpStatus, body: e.body };
}
