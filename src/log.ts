// Logs with pino: one JSON line per event on stdout (`ts`, `level`, `msg`, then the fields), or,
// on a terminal or with LOG_FORMAT=pretty, one readable colour line (pino-pretty). Secrets are
// replaced by pino's redaction at the paths of REDACT_PATHS before a line is written, so a
// careless call cannot leak a password, token or key. Writes are synchronous, so nothing is lost
// when the process exits: the main thread's through process.stdout (synchronous on Linux for
// files, terminals and pipes), a worker thread's straight to the file descriptor (its
// process.stdout would be relayed through the main thread).
import { isMainThread } from 'node:worker_threads';
import pino from 'pino';
import pretty from 'pino-pretty';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
export type LogFormat = 'json' | 'pretty';

export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
  readonly level: LogLevel;
}

/** Field names that hold secrets: redacted at the top level of a line and one level down. */
const SECRET_FIELDS = [
  'password',
  'passwd',
  'secret',
  'token',
  'jwt',
  'psk',
  'key',
  'authorization',
  'cookie',
  'adminPassword',
  'jwtSecret',
  'pskEncryptionKey',
  'databaseUrl',
  'mqttUrl',
];

/** pino redact paths: each secret field, at the top level and inside any field; request headers. */
export const REDACT_PATHS: readonly string[] = [
  ...SECRET_FIELDS,
  ...SECRET_FIELDS.map((f) => `*.${f}`),
  'headers.authorization',
  'headers.cookie',
  'req.headers.authorization',
  'req.headers.cookie',
];
export const REDACTED = '[redacted]';

/** Errors as `{type, message, stack}` under `error` or `err`; other values as they are. */
const serializeError = (value: unknown) => (value instanceof Error ? pino.stdSerializers.err(value) : value);

export interface LoggerOptions {
  format?: LogFormat;
  /** File descriptor written to: 1 (stdout) by default. */
  fd?: number;
  /** Where lines go instead of `fd` (tests). */
  write?: (line: string) => void;
}

/** Control characters as JSON writes them (a line break as `\n`, ESC as `\u001b`): visible, and never a line break. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const escapeControl = (text: string) => text.replace(/[\u0000-\u001f]/g, (c) => JSON.stringify(c).slice(1, -1));

function destination(format: LogFormat, opts: LoggerOptions): pino.DestinationStream {
  const fd = opts.fd ?? 1;
  const out = opts.write
    ? { write: opts.write }
    : isMainThread
      ? fd === 2
        ? process.stderr
        : process.stdout
      : pino.destination({ dest: fd, sync: true });
  if (format === 'json') return out;
  // pino-pretty's formatter, called in line: as synchronous as the JSON lines. The message is
  // written as it is, so its control characters are escaped (a value quoted in a start failure
  // may hold a line break): one event stays one line, and no text can pass for another line.
  const prettify = pretty.prettyFactory({
    colorize: !process.env.NO_COLOR,
    singleLine: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,service',
    // Errors as the other fields, on the line: pino-pretty's own rendering of error-like fields
    // writes the stack over several lines, and the message's control characters as they are.
    errorLikeObjectKeys: [],
    messageFormat: (log, messageKey) => {
      const msg = log[messageKey];
      return escapeControl(typeof msg === 'string' ? msg : '');
    },
  });
  return { write: (line: string) => out.write(prettify(line)) };
}

/** The field every line of every thread carries, so that a log pipeline can tell the service's lines apart. */
const SERVICE_FIELD = { service: 'device-registry' } as const;

function pinoOptions(level: LogLevel, format: LogFormat, base: LogFields): pino.LoggerOptions {
  return {
    level,
    base: { ...SERVICE_FIELD, ...base },
    redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    serializers: { error: serializeError, err: serializeError },
    // JSON: the shape these lines have always had (`ts` ISO 8601, `level` by name), so that log
    // pipelines reading them keep working. Pretty: pino's own, which pino-pretty reads.
    ...(format === 'json'
      ? { timestamp: () => `,"ts":"${new Date().toISOString()}"`, formatters: { level: (label: string) => ({ level: label }) } }
      : {}),
  };
}

function wrap(p: pino.Logger, level: LogLevel): Logger {
  return {
    level,
    debug: (msg, fields) => (fields ? p.debug(fields, msg) : p.debug(msg)),
    info: (msg, fields) => (fields ? p.info(fields, msg) : p.info(msg)),
    warn: (msg, fields) => (fields ? p.warn(fields, msg) : p.warn(msg)),
    error: (msg, fields) => (fields ? p.error(fields, msg) : p.error(msg)),
    child: (fields) => wrap(p.child(fields), level),
  };
}

export function createLogger(level: LogLevel, base: LogFields = {}, opts: LoggerOptions = {}): Logger {
  const format = opts.format ?? 'json';
  return wrap(pino(pinoOptions(level, format, base), destination(format, opts)), level);
}

/**
 * Node.js's process warnings (a deprecation, pg's SECURITY WARNING about an `sslmode`) as one
 * warn line of this thread's log, in its format, instead of Node's own several plain lines on
 * stderr. Each thread has its own: call it in each, once its logger exists.
 */
export function logProcessWarnings(log: Logger): void {
  // Warnings turned off (`--no-warnings`, NODE_NO_WARNINGS=1): Node writes none, nor do we.
  const off =
    process.env.NODE_NO_WARNINGS === '1' ||
    [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)].includes('--no-warnings');
  if (off) return;
  process.removeAllListeners('warning');
  process.on('warning', (w: Error & { code?: unknown }) =>
    log.warn(`${w.name}: ${w.message}`, typeof w.code === 'string' ? { code: w.code } : undefined),
  );
}

/** The format when LOG_FORMAT does not say: pretty on a terminal, JSON otherwise. */
export const defaultLogFormat = (): LogFormat => (process.stdout.isTTY ? 'pretty' : 'json');

/**
 * The one line of a start that failed (`start failed: ...`, `configuration error: ...`), on
 * stderr in the log format, whatever LOG_LEVEL says: it is why the process exits.
 */
export function writeStartFailure(format: LogFormat, msg: string, fields: LogFields = {}): void {
  createLogger('error', {}, { format, fd: 2 }).error(msg, fields);
}
