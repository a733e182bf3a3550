// Entry point: `npm start`. Reads the configuration, starts the service, and shuts it down
// gracefully on SIGINT/SIGTERM, within SHUTDOWN_TIMEOUT_MS.
import { earlySignals } from './early-signals.js';
import { ConfigError, logFormatOf, readConfig, type Config } from './config.js';
import { createLogger, logProcessWarnings, writeStartFailure, type LogFormat } from './log.js';
import type { Service } from './service.js';
import { applyHeapGrowing } from './v8-heap.js';

/** How much longer than SHUTDOWN_TIMEOUT_MS the process may take before it is ended with code 1. */
const HARD_STOP_GRACE_MS = 1000;

/** The one line of a failed start (in the log format), and exit 2. */
function fail(format: LogFormat, err: unknown): never {
  if (err instanceof ConfigError) writeStartFailure(format, `configuration error: ${err.message}`, { variable: err.variable });
  else writeStartFailure(format, `start failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(2);
}

let config: Config;
try {
  config = readConfig();
} catch (err) {
  let format: LogFormat;
  try {
    format = logFormatOf();
  } catch {
    format = 'json';
  }
  fail(format, err);
}
const log = createLogger(config.logLevel, {}, { format: config.logFormat });
logProcessWarnings(log);
// Process-wide, so before any thread starts.
applyHeapGrowing(config.v8HeapGrowingPercent);

process.on('unhandledRejection', (reason) =>
  log.error('unhandled promise rejection', { error: reason instanceof Error ? reason : String(reason) }),
);
// Node's own report of an uncaught exception is a multi-line stack on stderr, which a log
// collector reading JSON lines cannot parse: one log line instead, then the exit Node would make
// (code 1; the state is not safe to go on with; what was not acknowledged is sent again).
process.on('uncaughtException', (err) => {
  log.error('uncaught exception; exiting', { error: err });
  process.exit(1);
});

// Signals are handled from the first moment: before ready they cancel the start, which stops
// whatever had started (a running initdb is let finish, so DATA_DIR stays usable).
const aborter = new AbortController();
// Set once the start has finished (the handlers below are installed before that).
const running: { service?: Service } = {};
let stopping = false;
const shutdown = (signal: string) => {
  if (stopping) return;
  stopping = true;
  log.info('shutting down', { signal, timeoutMs: config.shutdownTimeoutMs });
  // Hard stop if something hangs.
  setTimeout(() => {
    log.error('shutdown timed out; exiting');
    process.exit(1);
  }, config.shutdownTimeoutMs + HARD_STOP_GRACE_MS).unref();
  const { service } = running;
  if (!service) {
    aborter.abort();
    return;
  }
  service.stop().then(
    () => {
      log.info('stopped');
      process.exit(0);
    },
    (err: unknown) => {
      log.error('shutdown failed', { error: err instanceof Error ? err : String(err) });
      process.exit(1);
    },
  );
};
earlySignals.handler = shutdown;
if (earlySignals.received !== undefined) shutdown(earlySignals.received);

const started = Date.now();
// Loaded only now (most of the modules): a signal while they load is handled, not fatal.
const { startService, StartAborted } = await import('./service.js');
running.service = await startService(config, log, aborter.signal).catch((err: unknown) => {
  if (err instanceof StartAborted) {
    log.info('stopped before ready');
    process.exit(0);
  }
  fail(config.logFormat, err);
});
log.info('ready', { startupMs: Date.now() - started });
