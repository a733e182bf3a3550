// One HTTP/1.1 connection under the test's control (keep-alive, one request at a time), to see
// what the service does with a connection itself: which answers close it, and when it is closed.
import net from 'node:net';

export interface RawAnswer {
  status: number;
  /** Header names in lower case. */
  headers: Record<string, string>;
  body: string;
}

export class RawConnection {
  private buffer = Buffer.alloc(0);
  private waiting: { resolve: (a: RawAnswer) => void; reject: (err: Error) => void } | undefined;
  /** Resolves when the connection is closed (by either side). */
  readonly closed: Promise<void>;
  isClosed = false;

  private constructor(private readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.parse();
    });
    this.closed = new Promise((resolve) =>
      socket.on('close', () => {
        this.isClosed = true;
        this.waiting?.reject(new Error('connection closed before the answer'));
        resolve();
      }),
    );
    socket.on('error', () => undefined);
  }

  static open(port: number, host = '127.0.0.1'): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, host, () => resolve(new RawConnection(socket)));
      socket.once('error', reject);
    });
  }

  /** Sends one request and resolves with its whole answer. */
  request(method: string, path: string, opts: { headers?: Record<string, string>; body?: unknown } = {}): Promise<RawAnswer> {
    const body = opts.body === undefined ? '' : JSON.stringify(opts.body);
    const headers: Record<string, string> = { host: 'localhost', ...(opts.headers ?? {}) };
    if (body) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(body));
    }
    const head = [`${method} ${path} HTTP/1.1`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)].join('\r\n');
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
      this.socket.write(`${head}\r\n\r\n${body}`);
    });
  }

  close(): void {
    this.socket.destroy();
  }

  private parse(): void {
    const end = this.buffer.indexOf('\r\n\r\n');
    if (end < 0 || !this.waiting) return;
    const [statusLine, ...lines] = this.buffer.subarray(0, end).toString('latin1').split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const i = line.indexOf(':');
      headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    const status = Number(statusLine!.split(' ')[1]);
    const length = status === 204 ? 0 : Number(headers['content-length'] ?? 0);
    if (this.buffer.length < end + 4 + length) return;
    const body = this.buffer.subarray(end + 4, end + 4 + length).toString('utf8');
    this.buffer = this.buffer.subarray(end + 4 + length);
    const w = this.waiting;
    this.waiting = undefined;
    w.resolve({ status, headers, body });
  }
}

/**
 * The status line and head of the answer to one GET whose header lines are written as given
 * (so a field may come on several lines, which fetch would join); the connection is closed once
 * the head is read, so it serves for a stream's answer too.
 */
export function rawHead(base: string, path: string, lines: string[]): Promise<{ status: number; head: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname, () =>
      socket.write([`GET ${path} HTTP/1.1`, `host: ${url.host}`, ...lines].join('\r\n') + '\r\n\r\n'),
    );
    let buffer = '';
    socket.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('latin1');
      const end = buffer.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.destroy();
      const head = buffer.slice(0, end);
      resolve({ status: Number(head.split(' ')[1]), head });
    });
    socket.on('error', reject);
    socket.on('close', () => reject(new Error('connection closed before the answer')));
  });
}
