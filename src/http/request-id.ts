// The request id of an answer (X-Request-Id): the client's when usable, else one of ours. Shared
// by the routed requests (server.ts) and the live stream's own handlers (src/live/stream.ts).
import crypto from 'node:crypto';

/** An X-Request-Id taken as it is: short, printable, no blanks (anything else gets an id of ours). */
const USABLE_REQUEST_ID = /^[A-Za-z0-9._:/+=@-]{1,128}$/;

/** The id for a request whose X-Request-Id header reads `given` ('' when absent). */
export function requestIdFor(given: string): string {
  return USABLE_REQUEST_ID.test(given) ? given : crypto.randomUUID();
}
