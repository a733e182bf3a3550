// All configuration is read and validated here, once, and then frozen.
// A bad value stops the start with one line naming the variable and what it expects.
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { defaultLogFormat, type LogFormat, type LogLevel } from './log.js';

export type { LogFormat, LogLevel };

/**
 * Who may log in to the broker as a device (docs/credentials.md): `required` every device with a
 * valid credential; `optional` a device with credentials must present one, one without connects
 * as before; `off` no credential is ever asked for.
 */
export type DeviceAuthMode = 'required' | 'optional' | 'off';

export interface Config {
  /** Public HTTP API. */
  host: string;
  port: number;
  /** Internal HTTP API (`/internal/...`), loopback by default. */
  internalHost: string;
  internalPort: number;
  dataDir: string;
  /** External PostgreSQL; when absent an embedded one is started under `dataDir`. */
  databaseUrl: string | undefined;
  embeddedPgPort: number | undefined;
  /** Server settings of the embedded PostgreSQL (name -> value): tuned defaults, then EMBEDDED_PG_SETTINGS. */
  embeddedPgSettings: Readonly<Record<string, string>>;
  pgPoolSize: number;
  /** External MQTT broker; when absent the embedded broker (aedes) listens on `mqttHost:mqttPort`. */
  mqttUrl: string | undefined;
  mqttHost: string;
  mqttPort: number;
  /**
   * Client id base of the service's broker connections (persistent sessions). Each instance leases
   * a slot of it in the database: `<base>` for the first, `<base>.1`, `<base>.2`... for the others
   * (src/broker/session-leases.ts), so instances started with the same settings never share ids.
   */
  mqttClientId: string;
  mqttSubscriberConnections: number;
  /** Shared-subscription group of the ingest subscribers; instances of one deployment share it. */
  mqttShareGroup: string;
  /** How long an instance's broker sessions stay its own without a heartbeat; then a surviving instance drains them. */
  mqttSessionLeaseSeconds: number;
  /** How long the broker keeps the subscribers' sessions (and queues their messages) while the service is away. */
  mqttSessionExpirySeconds: number;
  /** MQTT 5 Receive Maximum of each subscriber connection: messages in flight before the broker waits for acks. */
  mqttReceiveMaximum: number;
  mqttKeepaliveSeconds: number;
  dbStatementTimeoutMs: number;
  dbKeepaliveSeconds: number;
  /** Device logins; default `required` with DATABASE_URL, `optional` with the embedded database. */
  mqttDeviceAuth: DeviceAuthMode;
  /** The embedded broker's TLS listener (PEM file paths); both or neither. */
  mqttTlsCert: string | undefined;
  mqttTlsKey: string | undefined;
  /** CA (PEM file path) whose client certificates with CN `<tenant>:<device_id>` log a device in. */
  mqttTlsCa: string | undefined;
  mqttTlsPort: number;
  /** false: no plain listener (TLS only). */
  mqttPlain: boolean;
  /** Keep the external Mosquitto's device accounts in step over its dynamic-security plugin. */
  mqttDynamicSecurity: boolean;
  /** 32-byte key of the generated credentials' keyed hashes; derived from the PSK key when absent. */
  deviceCredentialKey: Buffer | undefined;
  /** Credentials one device may hold at once. */
  maxDeviceCredentials: number;
  logLevel: LogLevel;
  /** JSON lines, or readable colour lines (pino-pretty); default pretty on a terminal, else JSON. */
  logFormat: LogFormat;
  /** HS256 token key; generated into `dataDir` when absent. */
  jwtSecret: Uint8Array | undefined;
  jwtIssuer: string;
  tokenTtlSeconds: number;
  adminPassword: string | undefined;
  /** 32-byte key for pre-shared keys at rest; generated into `dataDir` with the embedded database. */
  pskEncryptionKey: Buffer | undefined;
  maxBodyBytes: number;
  maxPageSize: number;
  maxDeviceCount: number;
  /** Serialised public device views kept in memory for GET /device/{id}; 0 disables the cache. */
  deviceCacheSize: number;
  /** Serialised template views kept in memory for GET /template and /template/{id}; 0 disables the cache. */
  templateCacheSize: number;
  /**
   * The longest any registry cache entry is used (HTTP views and list pages, the ingest device
   * models, the embedded broker's device directory) before it is read again: the bound on
   * staleness should a change notification ever be missed.
   */
  registryCacheMaxAgeSeconds: number;
  ingestWorkers: number;
  ingestBatchRows: number;
  ingestBatchMs: number;
  maxMessageBytes: number;
  /** Devices whose attributes each shard worker keeps in memory. */
  ingestCacheDevices: number;
  /** Unacknowledged messages held by the ingest router before it stops reading from the broker. */
  ingestMaxPending: number;
  /** The young generation of each ingest thread, MB (INGEST_THREAD_YOUNG_GENERATION_MB; 0: V8's default). */
  ingestThreadYoungGenerationMb: number;
  /** The nice value of the ingest threads (router and shard workers), 0..19 (INGEST_THREAD_NICE; 0: the process's). */
  ingestThreadNice: number;
  /** Fixed heap growth between full collections, percent (V8_HEAP_GROWING_PERCENT; 0: V8's adaptive growth). */
  v8HeapGrowingPercent: number;
  /** Largest lastN/firstN, and the cap of a history query without them. */
  historyMaxResults: number;
  /** Most buckets an aggregate history read answers per attribute (HISTORY_MAX_BUCKETS). */
  historyMaxBuckets: number;
  /** Share of the time aggregate and latest-value reads may take while ingest has the host's CPU (HISTORY_READ_SHARE_PERCENT; 100: no limit). */
  historyReadSharePercent: number;
  /** Messages waiting this long with none acknowledged make ingest "stalled" (GET /health/ready). */
  ingestStallSeconds: number;
  /** How long an actuation waits for the broker to accept the message before answering 503. */
  actuationTimeoutMs: number;
  historyChunkInterval: string;
  historyRetentionDays: number | undefined;
  shutdownTimeoutMs: number;
  /** Seconds without a stored message after which a device is offline, unless its templates set `offline_after`. */
  deviceOfflineAfterSeconds: number;
  /** How often the devices' last_seen times are written to the database (one statement each time). */
  deviceStatusFlushMs: number;
  /** Bytes a live stream client may have unsent before its messages are dropped (and counted). */
  liveClientBufferBytes: number;
  /** Live stream clients (WebSocket and SSE) one tenant may have open on this instance; past it 429. */
  liveMaxClientsPerTenant: number;
  /** Committed telemetry shared with the other instances by PostgreSQL NOTIFY (docs/live.md); false: this instance's own only. */
  liveFanout: boolean;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    expectation: string,
  ) {
    super(`${variable} ${expectation}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

function value(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

function integer(env: Env, name: string, dflt: number, min: number, max: number): number {
  const v = value(env, name);
  if (v === undefined) return dflt;
  if (!/^-?\d+$/.test(v)) throw new ConfigError(name, `must be an integer between ${min} and ${max}, got "${v}"`);
  const n = Number(v);
  if (n < min || n > max) throw new ConfigError(name, `must be an integer between ${min} and ${max}, got ${n}`);
  return n;
}

/**
 * The embedded PostgreSQL's settings: defaults for a write-heavy history table, then the
 * `name=value` pairs of EMBEDDED_PG_SETTINGS (blank-separated), which win. shared_buffers is an
 * eighth of the memory this process may use (the cgroup limit in a container), between
 * PostgreSQL's own 128 MB and 1 GB; fewer checkpoints mean fewer full-page images in the WAL.
 * Together they cut PostgreSQL's CPU per ingested message by about 40 % once the history index
 * outgrows 128 MB (docs/messaging.md §9).
 */
function embeddedPgSettings(env: Env): Record<string, string> {
  const limit = process.constrainedMemory?.() ?? 0;
  const memory = limit > 0 ? Math.min(limit, os.totalmem()) : os.totalmem();
  const sharedBuffersMb = Math.max(128, Math.min(1024, Math.floor(memory / 8 / 1024 / 1024)));
  const settings: Record<string, string> = { shared_buffers: `${sharedBuffersMb}MB`, max_wal_size: '4GB', checkpoint_timeout: '15min' };
  const given = value(env, 'EMBEDDED_PG_SETTINGS');
  for (const pair of given?.split(/\s+/).filter(Boolean) ?? []) {
    const m = /^([a-z][a-z0-9_.]*)=([^\s=]+)$/.exec(pair);
    if (!m)
      throw new ConfigError(
        'EMBEDDED_PG_SETTINGS',
        `must be blank-separated PostgreSQL settings such as "shared_buffers=2GB max_wal_size=8GB", got "${pair}"`,
      );
    settings[m[1]!] = m[2]!;
  }
  return settings;
}

function optionalInteger(env: Env, name: string, min: number, max: number): number | undefined {
  return value(env, name) === undefined ? undefined : integer(env, name, 0, min, max);
}

function url(env: Env, name: string, protocols: string[]): string | undefined {
  const v = value(env, name);
  if (v === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(v);
  } catch {
    throw new ConfigError(name, `must be a URL (${protocols.join(', ')}), got an unparsable value`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must be a URL with scheme ${protocols.join(' or ')}, got "${parsed.protocol}"`);
  }
  // A '/', '?' or '#' left unencoded in the password ends the host there: the rest of the password
  // would be read as the path and shown in the start failure's "cannot use the database ...".
  // Never quoted: it holds a password.
  if ((parsed.pathname + parsed.search + parsed.hash).includes('@'))
    throw new ConfigError(name, "has an '@' after its host: a '/', '?' or '#' in its user name or password must be written %2F, %3F, %23");
  return v;
}

/** Whether every part percent-decodes (as the database and broker clients decode them: a bad escape throws there, "URI malformed"). */
function decodes(...parts: string[]): boolean {
  try {
    for (const p of parts) decodeURIComponent(p);
    return true;
  } catch {
    return false;
  }
}

const HOW_TO_ESCAPE = "that does not decode: write '%' as %25, and other characters as UTF-8 escapes (é as %C3%A9)";

/** DATABASE_URL: pg percent-decodes its user name, password and database name, so they must decode (never quoted: it holds a password). */
function databaseUrlOf(env: Env): string | undefined {
  const v = url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']);
  if (v === undefined) return undefined;
  const { username, password, pathname } = new URL(v);
  if (!decodes(username, password, pathname))
    throw new ConfigError('DATABASE_URL', `has a '%' in its user name, password or database name ${HOW_TO_ESCAPE}`);
  return v;
}

/** MQTT_URL: its user name and password are percent-decoded for the broker's login, so they must decode (the value is never quoted: it holds a password). */
function brokerUrl(env: Env): string | undefined {
  const v = url(env, 'MQTT_URL', ['mqtt:', 'mqtts:', 'tcp:', 'ssl:']);
  if (v === undefined) return undefined;
  const { username, password, pathname, search, hash } = new URL(v);
  // MQTT over TCP has no path, and mqtt.js reads options from a query: neither would be what was meant.
  if ((pathname !== '' && pathname !== '/') || search !== '' || hash !== '')
    throw new ConfigError(
      'MQTT_URL',
      'has a path, query or fragment, which a broker address does not take: mqtt://[user:password@]host:port',
    );
  if (!decodes(username, password)) throw new ConfigError('MQTT_URL', `has a '%' in its user name or password ${HOW_TO_ESCAPE}`);
  return v;
}

function host(env: Env, name: string, dflt: string): string {
  const v = value(env, name) ?? dflt;
  if (!/^[A-Za-z0-9.:_-]+$/.test(v)) throw new ConfigError(name, `must be a host name or IP address, got "${v}"`);
  return v;
}

/** A 32-byte key given as 64 hex characters or base64. */
function key32(env: Env, name: string): Buffer | undefined {
  const v = value(env, name);
  if (v === undefined) return undefined;
  let buf: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(v)) buf = Buffer.from(v, 'hex');
  else if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(v)) buf = Buffer.from(v, 'base64');
  if (!buf || buf.length !== 32) throw new ConfigError(name, 'must be 32 bytes, as 64 hex characters or base64');
  return buf;
}

function secret(env: Env, name: string): Uint8Array | undefined {
  const v = value(env, name);
  if (v === undefined) return undefined;
  if (Buffer.byteLength(v) < 32) throw new ConfigError(name, 'must be at least 32 characters long');
  return new TextEncoder().encode(v);
}

function bool(env: Env, name: string, dflt: boolean): boolean {
  const v = value(env, name)?.toLowerCase();
  if (v === undefined) return dflt;
  if (['true', '1', 'yes', 'on'].includes(v)) return true;
  if (['false', '0', 'no', 'off'].includes(v)) return false;
  throw new ConfigError(name, `must be true or false, got "${v}"`);
}

/** A file the service reads at start (certificates, keys): it must be readable now. */
function readableFile(env: Env, name: string): string | undefined {
  const v = value(env, name);
  if (v === undefined) return undefined;
  const file = path.resolve(v);
  try {
    fs.accessSync(file, fs.constants.R_OK);
  } catch {
    throw new ConfigError(name, `must name a readable file, got "${v}"`);
  }
  return file;
}

const DEVICE_AUTH_MODES: DeviceAuthMode[] = ['required', 'optional', 'off'];

/** MQTT_DEVICE_AUTH, and the embedded broker's TLS settings, checked together. */
function deviceAuth(env: Env, databaseUrl: string | undefined) {
  const mode = (value(env, 'MQTT_DEVICE_AUTH') ?? (databaseUrl ? 'required' : 'optional')).toLowerCase();
  if (!DEVICE_AUTH_MODES.includes(mode as DeviceAuthMode)) {
    throw new ConfigError('MQTT_DEVICE_AUTH', `must be one of ${DEVICE_AUTH_MODES.join(', ')}, got "${mode}"`);
  }
  const mqttTlsCert = readableFile(env, 'MQTT_TLS_CERT');
  const mqttTlsKey = readableFile(env, 'MQTT_TLS_KEY');
  // The listeners are the embedded broker's: with an external one they would be ignored silently.
  const external = value(env, 'MQTT_URL') !== undefined;
  for (const name of ['MQTT_TLS_CERT', 'MQTT_TLS_KEY', 'MQTT_TLS_CA', 'MQTT_TLS_PORT', 'MQTT_PLAIN']) {
    if (external && value(env, name) !== undefined)
      throw new ConfigError(name, "configures the embedded broker's listeners; with MQTT_URL set, configure TLS on that broker");
  }
  if ((mqttTlsCert === undefined) !== (mqttTlsKey === undefined)) {
    throw new ConfigError(
      mqttTlsCert ? 'MQTT_TLS_KEY' : 'MQTT_TLS_CERT',
      'must be set together with ' + (mqttTlsCert ? 'MQTT_TLS_CERT' : 'MQTT_TLS_KEY'),
    );
  }
  const mqttTlsCa = readableFile(env, 'MQTT_TLS_CA');
  if (mqttTlsCa && !mqttTlsCert)
    throw new ConfigError('MQTT_TLS_CA', 'needs MQTT_TLS_CERT and MQTT_TLS_KEY (client certificates are checked on the TLS listener)');
  const mqttPlain = bool(env, 'MQTT_PLAIN', true);
  if (!mqttPlain && !mqttTlsCert)
    throw new ConfigError('MQTT_PLAIN', 'can be false only with MQTT_TLS_CERT and MQTT_TLS_KEY (the broker needs a listener)');
  const mqttDynamicSecurity = bool(env, 'MQTT_DYNAMIC_SECURITY', false);
  if (mqttDynamicSecurity && !value(env, 'MQTT_URL'))
    throw new ConfigError('MQTT_DYNAMIC_SECURITY', 'needs MQTT_URL (the Mosquitto whose device accounts it keeps)');
  return {
    mqttDeviceAuth: mode as DeviceAuthMode,
    mqttTlsCert,
    mqttTlsKey,
    mqttTlsCa,
    mqttTlsPort: integer(env, 'MQTT_TLS_PORT', 8883, 0, 65535),
    mqttPlain,
    mqttDynamicSecurity,
    deviceCredentialKey: key32(env, 'DEVICE_CREDENTIAL_KEY'),
    maxDeviceCredentials: integer(env, 'MAX_DEVICE_CREDENTIALS', 10, 1, 1000),
  };
}

const LOG_LEVELS: LogLevel[] = ['debug', 'info', 'warn', 'error', 'silent'];
const LOG_FORMATS: LogFormat[] = ['json', 'pretty'];

/** LOG_FORMAT, or the default for this stdout; also read alone when the rest of the configuration fails. */
export function logFormatOf(env: Env = process.env): LogFormat {
  const format = (value(env, 'LOG_FORMAT') ?? defaultLogFormat()).toLowerCase();
  if (!LOG_FORMATS.includes(format as LogFormat))
    throw new ConfigError('LOG_FORMAT', `must be one of ${LOG_FORMATS.join(', ')}, got "${format}"`);
  return format as LogFormat;
}

/** LOG_LEVEL. */
function logLevelOf(env: Env): LogLevel {
  const level = (value(env, 'LOG_LEVEL') ?? 'info').toLowerCase();
  if (!LOG_LEVELS.includes(level as LogLevel))
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}, got "${level}"`);
  return level as LogLevel;
}

const CHUNK_MINUTES: Record<string, number> = { minute: 1, hour: 60, day: 1440, week: 10080 };

/** HISTORY_CHUNK_INTERVAL: stored in the database at the first start, so a zero or absurd interval must never get there. */
function chunkIntervalOf(env: Env): string {
  const chunk = value(env, 'HISTORY_CHUNK_INTERVAL') ?? '1 day';
  const parts = /^(\d+)\s*(minute|hour|day|week)s?$/.exec(chunk);
  const minutes = parts ? Number(parts[1]) * CHUNK_MINUTES[parts[2]!]! : NaN;
  if (!(minutes >= 1 && minutes <= 366 * 1440)) {
    throw new ConfigError(
      'HISTORY_CHUNK_INTERVAL',
      `must be an interval from "1 minute" to "366 days", such as "1 day" or "6 hours", got "${chunk}"`,
    );
  }
  return chunk;
}

/** A name of 1 to `max` letters, digits, '.', '_' or '-' (an MQTT client id base, a share group). */
function mqttName(env: Env, name: string, fallback: string, max: number): string {
  const v = value(env, name) ?? fallback;
  if (!new RegExp(`^[A-Za-z0-9_.-]{1,${max}}$`).test(v))
    throw new ConfigError(name, `must be 1-${max} letters, digits, '.', '_' or '-', got "${v}"`);
  return v;
}

export function readConfig(env: Env = process.env): Readonly<Config> {
  const databaseUrl = databaseUrlOf(env);
  const pskEncryptionKey = key32(env, 'PSK_ENCRYPTION_KEY');
  if (databaseUrl && pskEncryptionKey === undefined) {
    throw new ConfigError('PSK_ENCRYPTION_KEY', 'must be set when DATABASE_URL is set (32 bytes, as 64 hex characters or base64)');
  }
  // There is no embedded PostgreSQL with DATABASE_URL: its settings would be ignored silently.
  for (const name of ['EMBEDDED_PG_PORT', 'EMBEDDED_PG_SETTINGS']) {
    if (databaseUrl && value(env, name) !== undefined)
      throw new ConfigError(name, 'configures the embedded PostgreSQL; with DATABASE_URL set, configure that server');
  }
  const cores = Math.max(1, os.availableParallelism());
  const config: Config = {
    host: host(env, 'HOST', '0.0.0.0'),
    port: integer(env, 'PORT', 8000, 0, 65535),
    internalHost: host(env, 'INTERNAL_HOST', '127.0.0.1'),
    internalPort: integer(env, 'INTERNAL_PORT', 8001, 0, 65535),
    dataDir: path.resolve(value(env, 'DATA_DIR') ?? './data'),
    databaseUrl,
    embeddedPgPort: optionalInteger(env, 'EMBEDDED_PG_PORT', 1, 65535),
    embeddedPgSettings: embeddedPgSettings(env),
    pgPoolSize: integer(env, 'PG_POOL_SIZE', 10, 1, 1000),
    dbStatementTimeoutMs: integer(env, 'DB_STATEMENT_TIMEOUT_MS', 60_000, 0, 86_400_000),
    dbKeepaliveSeconds: integer(env, 'DB_KEEPALIVE_SECONDS', 30, 1, 7200),
    mqttUrl: brokerUrl(env),
    mqttHost: host(env, 'MQTT_HOST', '0.0.0.0'),
    mqttPort: integer(env, 'MQTT_PORT', 1883, 0, 65535),
    mqttClientId: mqttName(env, 'MQTT_CLIENT_ID', 'device-registry-ingest', 40),
    mqttSubscriberConnections: integer(env, 'MQTT_SUBSCRIBER_CONNECTIONS', 8, 1, 256),
    // One group for every instance of a deployment, whatever their client ids (several groups
    // would each receive, and store, every message).
    mqttShareGroup: mqttName(env, 'MQTT_SHARE_GROUP', 'device-registry', 64),
    mqttSessionExpirySeconds: integer(env, 'MQTT_SESSION_EXPIRY_SECONDS', 86400, 1, 0xffffffff),
    mqttSessionLeaseSeconds: integer(env, 'MQTT_SESSION_LEASE_SECONDS', 15, 3, 3600),
    mqttReceiveMaximum: integer(env, 'MQTT_RECEIVE_MAXIMUM', 10000, 1, 65535),
    mqttKeepaliveSeconds: integer(env, 'MQTT_KEEPALIVE_SECONDS', 30, 2, 65535),
    ...deviceAuth(env, databaseUrl),
    logLevel: logLevelOf(env),
    logFormat: logFormatOf(env),
    jwtSecret: secret(env, 'JWT_SECRET'),
    jwtIssuer: value(env, 'JWT_ISSUER') ?? 'device-registry',
    tokenTtlSeconds: integer(env, 'TOKEN_TTL_SECONDS', 3600, 1, 365 * 24 * 3600),
    // Only needed when the first admin is created; auth/bootstrap checks it then.
    adminPassword: value(env, 'ADMIN_PASSWORD'),
    pskEncryptionKey,
    maxBodyBytes: integer(env, 'MAX_BODY_BYTES', 1024 * 1024, 1, 1024 * 1024 * 1024),
    maxPageSize: integer(env, 'MAX_PAGE_SIZE', 1000, 1, 1_000_000),
    maxDeviceCount: integer(env, 'MAX_DEVICE_COUNT', 10000, 1, 1_000_000),
    deviceCacheSize: integer(env, 'DEVICE_CACHE_SIZE', 100_000, 0, 10_000_000),
    templateCacheSize: integer(env, 'TEMPLATE_CACHE_SIZE', 100_000, 0, 10_000_000),
    registryCacheMaxAgeSeconds: integer(env, 'REGISTRY_CACHE_MAX_AGE_SECONDS', 60, 1, 86_400),
    ingestWorkers: integer(env, 'INGEST_WORKERS', cores, 1, 256),
    ingestBatchRows: integer(env, 'INGEST_BATCH_ROWS', 5000, 1, 1_000_000),
    ingestBatchMs: integer(env, 'INGEST_BATCH_MS', 50, 1, 60_000),
    maxMessageBytes: integer(env, 'MAX_MESSAGE_BYTES', 64 * 1024, 1, 256 * 1024 * 1024),
    ingestCacheDevices: integer(env, 'INGEST_CACHE_DEVICES', 1_000_000, 1, 100_000_000),
    ingestMaxPending: integer(env, 'INGEST_MAX_PENDING', 200_000, 100, 100_000_000),
    ingestThreadYoungGenerationMb: integer(env, 'INGEST_THREAD_YOUNG_GENERATION_MB', 24, 0, 4096),
    ingestThreadNice: integer(env, 'INGEST_THREAD_NICE', 0, 0, 19),
    v8HeapGrowingPercent: integer(env, 'V8_HEAP_GROWING_PERCENT', 30, 0, 1000),
    historyMaxResults: integer(env, 'HISTORY_MAX_RESULTS', 10_000, 1, 10_000_000),
    historyMaxBuckets: integer(env, 'HISTORY_MAX_BUCKETS', 1000, 1, 1_000_000),
    historyReadSharePercent: integer(env, 'HISTORY_READ_SHARE_PERCENT', 10, 1, 100),
    ingestStallSeconds: integer(env, 'INGEST_STALL_SECONDS', 30, 1, 86_400),
    actuationTimeoutMs: integer(env, 'ACTUATION_TIMEOUT_MS', 5000, 1, 600_000),
    historyChunkInterval: chunkIntervalOf(env),
    historyRetentionDays: optionalInteger(env, 'HISTORY_RETENTION_DAYS', 1, 100_000),
    shutdownTimeoutMs: integer(env, 'SHUTDOWN_TIMEOUT_MS', 8000, 100, 600_000),
    deviceOfflineAfterSeconds: integer(env, 'DEVICE_OFFLINE_AFTER_SECONDS', 600, 1, 31_536_000),
    deviceStatusFlushMs: integer(env, 'DEVICE_STATUS_FLUSH_MS', 1000, 50, 60_000),
    liveClientBufferBytes: integer(env, 'LIVE_CLIENT_BUFFER_BYTES', 1024 * 1024, 1024, 1024 * 1024 * 1024),
    liveMaxClientsPerTenant: integer(env, 'LIVE_MAX_CLIENTS_PER_TENANT', 1000, 1, 1_000_000),
    liveFanout: bool(env, 'LIVE_FANOUT', true),
  };
  checkListenersApart(config);
  return Object.freeze(config);
}

/** Whether listeners on `a` and `b` (one port) would clash: the same address, or one covering the other ('::' every address, '0.0.0.0' every IPv4 one). */
function overlapping(a: string, b: string): boolean {
  if (a === b || a === '::' || b === '::') return true;
  return (a === '0.0.0.0' && !net.isIPv6(b)) || (b === '0.0.0.0' && !net.isIPv6(a));
}

/**
 * Two of the service's own listeners on one port (and an address both cover) is a configuration
 * error naming both variables. Before, found by an audit, the second listener failed to bind and
 * the start blamed a taken port, naming one variable or the wrong one (MQTT_TLS_PORT equal to
 * PORT was reported as PORT/HOST).
 */
function checkListenersApart(c: Config): void {
  const listeners: Array<{ name: string; port: number; host: string }> = [
    { name: 'PORT', port: c.port, host: c.host },
    { name: 'INTERNAL_PORT', port: c.internalPort, host: c.internalHost },
  ];
  if (c.mqttUrl === undefined) {
    if (c.mqttPlain) listeners.push({ name: 'MQTT_PORT', port: c.mqttPort, host: c.mqttHost });
    if (c.mqttTlsCert !== undefined) listeners.push({ name: 'MQTT_TLS_PORT', port: c.mqttTlsPort, host: c.mqttHost });
  }
  if (c.databaseUrl === undefined && c.embeddedPgPort !== undefined)
    listeners.push({ name: 'EMBEDDED_PG_PORT', port: c.embeddedPgPort, host: '127.0.0.1' });
  listeners.forEach((later, i) => {
    // Port 0 is any free port: never the same twice.
    const earlier = listeners.slice(0, i).find((l) => l.port !== 0 && l.port === later.port && overlapping(l.host, later.host));
    if (earlier)
      throw new ConfigError(
        later.name,
        `is ${later.port}, the port of ${earlier.name} too: each listener needs a port of its own (or 0: any free one)`,
      );
  });
}
