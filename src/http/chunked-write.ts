// Writing a chunked answer (streamed exports, the live stream's Server-Sent Events) without
// losing bytes to a uWebSockets.js bug.
//
// uWS corks writes into one 16 KiB buffer per loop. A write that does not fit in what is left
// of it flushes the buffer first, and when the socket does not take all of that (a client
// reading slowly), the uWS in this binary returns without writing or buffering the new data
// (AsyncSocket::uncork; fixed upstream in uWebSockets v20.77, after the last build of the
// package we use). The chunk's size line has gone out, its data never does: the client reads a
// broken answer and drops the connection. Found by CI: an SSE client that paused lost its
// stream the moment it read again. So data is only ever written corked in runs that fit the
// cork buffer, a larger piece split into such runs, each in a cork of its own.
import type uWS from 'uWebSockets.js';

/** uWS's cork buffer (LoopData::CORK_BUFFER_SIZE). */
const CORK_BUFFER_BYTES = 16 * 1024;
/** What a run may hold: room is kept for an answer's status line and headers (on its first write). */
export const CORK_RUN_BYTES = CORK_BUFFER_BYTES - 2048;
/** What uWS adds to each write of a chunked answer: CRLF, the size in hex, CRLF. */
const CHUNK_FRAMING_BYTES = 12;

/** The bytes a write of `data` puts in the cork buffer. */
export function corkedBytes(data: string | Uint8Array): number {
  return (typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength) + CHUNK_FRAMING_BYTES;
}

/**
 * Writes all of `data`, in pieces that each fit a cork of their own; `first` runs in the first
 * cork before the data (an answer's status line and headers). Answers false when uWS had to
 * buffer some of it (backpressure: wait for onWritable before writing more).
 *
 * Not for a response whose own uWS callback is running (its socket is corked already, with an
 * unknown amount in the buffer): those write only small texts (headers, a first comment).
 */
export function writeChunked(res: uWS.HttpResponse, data: string | Uint8Array, first?: () => void): boolean {
  let ok = true;
  if (corkedBytes(data) <= CORK_RUN_BYTES) {
    res.cork(() => {
      first?.();
      ok = res.write(data);
    });
    return ok;
  }
  const bytes = typeof data === 'string' ? Buffer.from(data) : data;
  const piece = CORK_RUN_BYTES - CHUNK_FRAMING_BYTES;
  for (let at = 0; at < bytes.byteLength; at += piece) {
    res.cork(() => {
      if (at === 0) first?.();
      // (written on after a buffered piece: uWS appends the rest to what it buffers, in order)
      if (!res.write(bytes.subarray(at, at + piece))) ok = false;
    });
  }
  return ok;
}
