// `Accept` (RFC 9110 §12.5.1), for the operations routes, which answer one media type each: a
// client that sends Accept and allows neither that type, its `type/*`, nor `*/*` gets 406.
import { errors } from '../errors.js';
import type { Reply } from './types.js';

export function accepts(header: string, mediaType: string): boolean {
  if (header.trim() === '') return true;
  const [type] = mediaType.split('/');
  return header.split(',').some((range) => {
    const [name, ...params] = range.split(';').map((s) => s.trim().toLowerCase());
    const q = params.find((p) => p.startsWith('q='));
    if (q !== undefined && !(Number(q.slice(2)) > 0)) return false;
    return name === '*/*' || name === `${type}/*` || name === mediaType;
  });
}

/** The 406 answer when `accept` excludes `mediaType`, else undefined. */
export function notAcceptable(accept: string, mediaType: string): Reply | undefined {
  if (accepts(accept, mediaType)) return undefined;
  const e = errors.notAcceptable(mediaType);
  return { status: e.httpStatus, body: e.body };
}
