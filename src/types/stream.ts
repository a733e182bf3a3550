// The sink of a streamed HTTP answer (src/http/server.ts writes it, src/history/export.ts fills
// it): a foundation type, so that the domain modules producing a stream need not import the HTTP layer.

/**
 * The body of a streamed answer (`Reply.stream`), written as it is produced. `write` returns
 * false when the client does not keep up (uWS buffered the chunk): the producer then waits for
 * `drained()` before writing more, so memory stays bounded by one chunk or so per stream.
 */
export interface StreamOut {
  write(chunk: Buffer | string): boolean;
  /** Resolves when the client can take more (or has gone: check `aborted`). */
  drained(): Promise<void>;
  /** The client went away: stop producing. */
  readonly aborted: boolean;
  /** Called once when the client goes away. */
  onAbort(fn: () => void): void;
}
