// A device's translators (`meta-translator` attributes: JSON Patch operations) applied to one
// message. Two guards keep one message from stalling its shard:
//   - an operation that cannot apply (a missing `from` or `path`, a failed `test`) is found here,
//     without fast-json-patch: its errors carry the whole document, pretty-printed, in their
//     message, a cost that grows with the square of the message's nesting (an audit: one 32 KB
//     message 8,000 levels deep held its shard for 22 s; every message missing an optional
//     translator's key paid a copy of itself as text);
//   - the document may grow to TRANSLATED_MAX_BYTES (256 KiB) at most: copies of the root, or of a part
//     into itself, double it each time (an audit: 30 such translators took a worker past 3.9 GB).
// An operation refused by either guard fails like any other: skipped when optional, else the
// message is dropped (`translation_failed`).
import jsonPatch, { type Operation } from 'fast-json-patch';

/** One translator: a JSON Patch operation, and whether the message goes on when it fails. */
export interface Translator {
  op: Operation;
  optional: boolean;
}

/** The largest a message may grow to through its translators (its JSON text, in UTF-16 units). */
export const TRANSLATED_MAX_BYTES = 256 * 1024;

const INDEX = /^(0|[1-9]\d*)$/;
/** The JSON text length of each translator's own value (add, replace), computed once. */
const valueSizes = new WeakMap<Translator, number>();

/** The message's document after the translators; undefined when a translator that is not optional failed. */
export function applyTranslators(doc: unknown, translators: Translator[], payloadSize: number): unknown {
  let size = payloadSize;
  for (const t of translators) {
    const grown = size + growthOf(doc, t, TRANSLATED_MAX_BYTES - size);
    const applied = grown <= TRANSLATED_MAX_BYTES && applies(doc, t.op) ? apply(doc, t.op) : FAILED;
    if (applied === FAILED) {
      if (t.optional) continue;
      return undefined;
    }
    doc = applied;
    size = grown;
  }
  return doc;
}

const FAILED = Symbol('failed');

function apply(doc: unknown, op: Operation): unknown {
  if (op.op === 'test') return doc; // checked by `applies`
  try {
    // Applied in place (fast), so what goes in is a copy: by reference, the next translator
    // would write into the template's own value (seen by every later message), or a copy into
    // its original. A copy is made here, without recursion (fast-json-patch's, through
    // JSON.stringify, costs the square of the nesting), and added.
    if (op.op === 'copy') op = { op: 'add', path: op.path, value: jsonClone(resolve(doc, op.from).value) };
    else if ((op.op === 'add' || op.op === 'replace') && op.value !== null && typeof op.value === 'object')
      op = { ...op, value: jsonClone(op.value) };
    // Not validated again: `applies` made fast-json-patch's checks (prototype pointers are refused when the translator is read).
    return jsonPatch.applyOperation(doc, op, false, true, true).newDocument;
  } catch {
    return FAILED;
  }
}

/** A copy of a JSON value, made without recursion (any nesting). */
function jsonClone(value: unknown): unknown {
  const fresh = (v: unknown): unknown => (Array.isArray(v) ? new Array<unknown>(v.length) : {});
  if (value === null || typeof value !== 'object') return value;
  const root = fresh(value);
  const stack: Array<[unknown, unknown]> = [[value, root]];
  while (stack.length > 0) {
    const [from, to] = stack.pop()!;
    const entries: Array<[string | number, unknown]> = Array.isArray(from) ? from.map((x, i) => [i, x]) : Object.entries(from as object);
    for (const [k, x] of entries) {
      const copy = x !== null && typeof x === 'object' ? fresh(x) : x;
      // (a key `__proto__` is an own property, as JSON.parse makes it, not the prototype)
      Object.defineProperty(to, k, { value: copy, enumerable: true, writable: true, configurable: true });
      if (copy !== x) stack.push([x, copy]);
    }
  }
  return root;
}

/** How much the operation adds to the document's text (about; a bound), Infinity past `room`. */
function growthOf(doc: unknown, t: Translator, room: number): number {
  const op = t.op;
  if (op.op === 'copy') {
    const found = resolve(doc, op.from);
    return found.exists ? jsonLength(found.value, room) : 0; // (a missing `from` fails anyway)
  }
  if (op.op === 'add' || op.op === 'replace') {
    let n = valueSizes.get(t);
    if (n === undefined) valueSizes.set(t, (n = jsonLength(op.value, TRANSLATED_MAX_BYTES)));
    return n;
  }
  return 0;
}

/**
 * The length of a value's JSON text, about (quotes, brackets and separators counted; escapes
 * not), counted without making the text: JSON.stringify's cost grows with the square of the
 * nesting, and it would make the text whole before it could be measured. Infinity past `limit`.
 */
function jsonLength(value: unknown, limit: number): number {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') n += v.length + 2;
    else if (typeof v === 'number') n += String(v).length;
    else if (v === null || typeof v !== 'object') n += 5;
    else if (Array.isArray(v)) {
      n += 1 + v.length;
      for (const x of v as unknown[]) stack.push(x);
    } else {
      for (const [k, x] of Object.entries(v)) {
        n += k.length + 4;
        stack.push(x);
      }
      n += 2;
    }
    if (n > limit) return Infinity;
  }
  return n;
}

/** Whether fast-json-patch would apply the operation to this document (its own checks, without building an error). */
function applies(doc: unknown, op: Operation): boolean {
  switch (op.op) {
    case 'add':
      return canAdd(doc, op.path);
    case 'remove':
    case 'replace':
      return resolve(doc, op.path).exists;
    case 'copy':
      return resolve(doc, op.from).exists && canAdd(doc, op.path);
    case 'move':
      // Not into itself: once removed from `from`, its new place would be gone.
      return resolve(doc, op.from).exists && !op.path.startsWith(op.from + '/') && canAdd(doc, op.path);
    case 'test': {
      const found = resolve(doc, op.path);
      return found.exists && jsonPatch._areEquals(found.value, op.value);
    }
    default:
      return false;
  }
}

/** The value a JSON pointer names (own properties and array elements only). */
function resolve(doc: unknown, pointer: string): { exists: boolean; value?: unknown } {
  if (pointer === '') return { exists: true, value: doc };
  if (!pointer.startsWith('/')) return { exists: false };
  let node = doc;
  for (const raw of pointer.slice(1).split('/')) {
    const key = unescape(raw);
    if (Array.isArray(node)) {
      if (!INDEX.test(key) || Number(key) >= node.length) return { exists: false };
      node = node[Number(key)];
    } else if (node !== null && typeof node === 'object' && Object.prototype.hasOwnProperty.call(node, key)) {
      node = (node as Record<string, unknown>)[key];
    } else {
      return { exists: false };
    }
  }
  return { exists: true, value: node };
}

/** Whether a value can be added at `pointer`: its parent is an object, or an array and the key an index up to its length or `-`. */
function canAdd(doc: unknown, pointer: string): boolean {
  if (pointer === '') return true;
  const cut = pointer.lastIndexOf('/');
  if (cut < 0) return false;
  const parent = resolve(doc, pointer.slice(0, cut));
  if (!parent.exists) return false;
  const key = unescape(pointer.slice(cut + 1));
  if (Array.isArray(parent.value)) return key === '-' || (INDEX.test(key) && Number(key) <= parent.value.length);
  return parent.value !== null && typeof parent.value === 'object';
}

/** A JSON pointer's reference token: `~1` is `/`, `~0` is `~`. */
function unescape(token: string): string {
  return token.includes('~') ? token.replace(/~1/g, '/').replace(/~0/g, '~') : token;
}
