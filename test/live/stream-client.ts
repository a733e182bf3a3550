// A test client of GET /stream: a WebSocket (ws) or an SSE reader (fetch), collecting every
// message as parsed JSON, with a wait for the first message that fits.
import WebSocket from 'ws';

export type LiveMessage = Record<string, unknown> & { type: string };

export interface StreamClient {
  messages: LiveMessage[];
  /** Resolves with the first message (already received or to come) for which `fits` holds. */
  next(fits: (m: LiveMessage) => boolean, what: string, timeoutMs?: number): Promise<LiveMessage>;
  close(): void;
}

function collector(): { messages: LiveMessage[]; push(m: LiveMessage): void; next: StreamClient['next'] } {
  const messages: LiveMessage[] = [];
  const waiters = new Set<() => void>();
  return {
    messages,
    push(m) {
      messages.push(m);
      for (const w of waiters) w();
    },
    next(fits, what, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        let seen = 0;
        const check = () => {
          for (; seen < messages.length; seen++) {
            if (fits(messages[seen]!)) {
              waiters.delete(check);
              clearTimeout(timer);
              resolve(messages[seen]!);
              return;
            }
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no stream message: ${what}; got ${JSON.stringify(messages.slice(-5))}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
  };
}

export interface WsStream extends StreamClient {
  ws: WebSocket;
  closed: Promise<{ code: number; reason: string }>;
  send(msg: unknown): void;
}

/** Opens a WebSocket; resolves once open (rejects with the HTTP status of a refused upgrade). */
export function openWs(
  url: string,
  opts: { token?: string; protocols?: string[]; headers?: Record<string, string> } = {},
): Promise<WsStream> {
  const c = collector();
  const ws = new WebSocket(url, opts.protocols ?? [], {
    headers: { ...opts.headers, ...(opts.token ? { Authorization: `Bearer ${opts.token}` } : {}) },
  });
  ws.on('message', (data: Buffer) => c.push(JSON.parse(data.toString('utf8')) as LiveMessage));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code: number, reason: Buffer) => resolve({ code, reason: reason.toString() })),
  );
  return new Promise((resolve, reject) => {
    ws.on('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.on('error', reject);
    ws.on('open', () =>
      resolve({
        ...c,
        ws,
        closed,
        send: (msg) => ws.send(JSON.stringify(msg)),
        close: () => ws.close(),
      }),
    );
  });
}

export interface SseStream extends StreamClient {
  /** Named events (`event: closed`) as received. */
  events: Array<{ event: string; data: LiveMessage }>;
  ended: Promise<void>;
}

/** Reads GET /stream as Server-Sent Events (`headers`: more request headers, e.g. X-Request-Id). */
export async function openSse(url: string, token?: string, headers: Record<string, string> = {}): Promise<SseStream> {
  const c = collector();
  const events: Array<{ event: string; data: LiveMessage }> = [];
  const abort = new AbortController();
  const res = await fetch(url, {
    headers: { ...headers, Accept: 'text/event-stream', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    signal: abort.signal,
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const ended = (async () => {
    let buf = '';
    try {
      for (;;) {
        const chunk = (await reader.read()) as { done: boolean; value?: Uint8Array };
        if (chunk.done) return;
        const value = chunk.value;
        buf += decoder.decode(value, { stream: true });
        let end: number;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          let event = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) event = line.slice(7);
            else if (line.startsWith('data: ')) data += line.slice(6);
          }
          if (data === '') continue;
          const msg = JSON.parse(data) as LiveMessage;
          if (event === 'message') c.push(msg);
          else events.push({ event, data: msg });
        }
      }
    } catch {
      /* aborted */
    }
  })();
  return { ...c, events, ended, close: () => abort.abort() };
}
