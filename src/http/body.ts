// Request bodies: collected from uWS (413 past the limit), then read as JSON text: a JSON
// Content-Type, UTF-8 (RFC 8259 §8.1; anything else is 400, never stored with U+FFFD; a leading
// BOM is ignored), valid JSON, and no lone surrogate in its strings.
import type uWS from 'uWebSockets.js';
import { errors, type ApiError } from '../errors.js';

const JSON_TYPE = /^application\/json\s*(;|$)/i;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The client went away before its whole body arrived: there is nothing to answer, and nothing was done. */
export class BodyAborted extends Error {
  constructor() {
    super('the client went away before its whole body arrived');
  }
}

/**
 * Collects the request body, copying each chunk (uWS reuses them). Past `limit` bytes the
 * promise rejects with 413 at once; the connection is closed when the 413 is written. A client
 * that goes away first (its connection closed, or ended by uWS's idle timeout) rejects it with
 * `BodyAborted` through `onAbort` (uWS calls no `onData` again then, and a request waiting for
 * the rest would stay in flight for ever).
 */
export function readBody(res: uWS.HttpResponse, limit: number, onAbort: (listener: () => void) => void): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    onAbort(() => reject(new BodyAborted()));
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

/** The body as parsed JSON; `bad()` is thrown for anything that is not JSON text sent as JSON. */
export function parseJson(raw: Buffer, contentType: string, bad: () => ApiError): unknown {
  if (!JSON_TYPE.test(contentType)) throw bad();
  let text: string;
  let parsed: unknown;
  try {
    text = utf8.decode(raw);
    parsed = JSON.parse(text);
  } catch {
    throw bad();
  }
  if (!wellFormed(text, parsed)) throw bad();
  return parsed;
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
      // One by one: spread into push, an array of some 120,000 items overflows the call stack.
      for (const x of v as unknown[]) pending.push(x);
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        if (LONE_SURROGATE.test(k)) return false;
        pending.push(x);
      }
    }
  }
  return true;
}
