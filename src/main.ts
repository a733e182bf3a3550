// Entry point: `npm start`. Reads the configuration, starts the service, and shuts it down
// gracefully on SIGINT/SIGTERM.
import { ConfigError, readConfig, type Config } from './config.js';
import { createLogger } from './log.js';
import { startService, StartAborted, type Service } from './service.js';

function fail(message: string): never {
  process.stderr.write(message + '\n');
  process.exit(2);
}

let config: Config;
try {
  config = readConfig();
} catch (err) {
  fail(err instanceof ConfigError ? `configuration error: ${err.message}` : String(err));
}
const log = createLogger(config.logLevel, { service: 'device-registry' });

process.on('unhandledRejection', (reason) =>
  log.error('unhandled promise rejection', { error: reason instanceof Error ? reason : String(reason) }),
);

// Signals are handled from the first moment: before ready they cancel the start, which stops
// whatever had started (a running initdb is let finish, so DATA_DIR stays usable).
const aborter = new AbortController();
// Set once the start has finished (the handlers below are installed before that).
const running: { service?: Service } = {};
let stopping = false;
const shutdown = (signal: string) => {
  if (stopping) return;
  stopping = true;
  log.info('shutting down', { signal });
  // Hard stop if something hangs: the whole shutdown stays within 10 s.
  setTimeout(() => {
    log.error('shutdown timed out; exiting');
    process.exit(1);
  }, config.shutdownTimeoutMs + 1500).unref();
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
process.on('SIGINT', () => shutdown('SIGINT'));
process.on('SIGTERM', () => shutdown('SIGTERM'));

const started = Date.now();
running.service = await startService(config, log, aborter.signal).catch((err: unknown) => {
  if (err instanceof StartAborted) {
    log.info('stopped before ready');
    process.exit(0);
  }
  if (err instanceof ConfigError) fail(`configuration error: ${err.message}`);
  fail(`start failed: ${err instanceof Error ? err.message : String(err)}`);
});
log.info('ready', { startupMs: Date.now() - started });
