// The messaging part of the configuration: defaults and rejected values.
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { ConfigError, readConfig } from '../../src/config.js';
import { freePort } from '../../src/net.js';
import { spawnService, testEnv, startFailure } from '../helpers/service.js';

describe('messaging configuration', () => {
  it('has the documented defaults', () => {
    const c = readConfig({});
    expect(c.mqttClientId).toBe('device-registry-ingest');
    expect(c.mqttShareGroup).toBe('device-registry');
    expect(c.mqttSessionLeaseSeconds).toBe(15);
    expect(c.registryCacheMaxAgeSeconds).toBe(60);
    expect(c.mqttSubscriberConnections).toBe(8);
    expect(c.mqttSessionExpirySeconds).toBe(86400);
    expect(c.mqttReceiveMaximum).toBe(10000);
    expect(c.ingestBatchRows).toBe(5000);
    expect(c.ingestBatchMs).toBe(50);
    expect(c.maxMessageBytes).toBe(65536);
    expect(c.ingestMaxPending).toBe(200000);
    expect(c.historyChunkInterval).toBe('1 day');
    expect(c.historyRetentionDays).toBeUndefined();
    expect(c.historyMaxResults).toBe(10000);
    expect(c.actuationTimeoutMs).toBe(5000);
    expect(c.ingestThreadYoungGenerationMb).toBe(24);
    expect(c.v8HeapGrowingPercent).toBe(30);
    expect(c.historyReadSharePercent).toBe(10);
    expect(c.ingestThreadNice).toBe(0);
  });

  it('one share group whatever MQTT_CLIENT_ID is (instances with their own ids must not each get every message)', () => {
    expect(readConfig({ MQTT_CLIENT_ID: 'instance-1' }).mqttShareGroup).toBe('device-registry');
    expect(readConfig({ MQTT_CLIENT_ID: 'instance-1', MQTT_SHARE_GROUP: 'registry' }).mqttShareGroup).toBe('registry');
  });

  it.each([
    ['MQTT_URL', 'ws://broker:8080', /MQTT_URL must be a URL with scheme mqtt:/],
    ['MQTT_CLIENT_ID', 'has space', /MQTT_CLIENT_ID must be/],
    ['MQTT_SHARE_GROUP', 'a/b', /MQTT_SHARE_GROUP must be/],
    ['MQTT_RECEIVE_MAXIMUM', '70000', /MQTT_RECEIVE_MAXIMUM must be an integer between 1 and 65535/],
    ['MQTT_SESSION_EXPIRY_SECONDS', '0', /MQTT_SESSION_EXPIRY_SECONDS must be an integer/],
    ['INGEST_WORKERS', '0', /INGEST_WORKERS must be an integer/],
    ['INGEST_BATCH_ROWS', 'many', /INGEST_BATCH_ROWS must be an integer/],
    ['HISTORY_RETENTION_DAYS', '0', /HISTORY_RETENTION_DAYS must be an integer between 1/],
    ['HISTORY_MAX_RESULTS', '-5', /HISTORY_MAX_RESULTS must be an integer/],
    ['ACTUATION_TIMEOUT_MS', 'soon', /ACTUATION_TIMEOUT_MS must be an integer/],
    ['MQTT_SESSION_LEASE_SECONDS', '2', /MQTT_SESSION_LEASE_SECONDS must be an integer between 3 and 3600/],
    ['REGISTRY_CACHE_MAX_AGE_SECONDS', '0', /REGISTRY_CACHE_MAX_AGE_SECONDS must be an integer between 1 and 86400/],
    ['INGEST_THREAD_YOUNG_GENERATION_MB', '-1', /INGEST_THREAD_YOUNG_GENERATION_MB must be an integer between 0 and 4096/],
    ['V8_HEAP_GROWING_PERCENT', 'lots', /V8_HEAP_GROWING_PERCENT must be an integer between 0 and 1000/],
    ['INGEST_THREAD_NICE', '20', /INGEST_THREAD_NICE must be an integer between 0 and 19/],
    ['HISTORY_READ_SHARE_PERCENT', '0', /HISTORY_READ_SHARE_PERCENT must be an integer between 1 and 100/],
    ['HISTORY_READ_SHARE_PERCENT', '101', /HISTORY_READ_SHARE_PERCENT must be an integer between 1 and 100/],
  ])('rejects %s=%s naming the variable', (name, value, message) => {
    const run = () => readConfig({ [name]: value });
    expect(run).toThrow(ConfigError);
    expect(run).toThrow(message);
  });
});

describe('an unreachable broker', () => {
  it('MQTT_URL pointing nowhere stops the start with one line naming the broker', async () => {
    const port = await freePort();
    const svc = spawnService(await testEnv({ MQTT_URL: `mqtt://127.0.0.1:${port}`, LOG_LEVEL: 'error' }));
    expect(await svc.exited).toBe(2);
    expect(startFailure(svc)).toMatch(
      new RegExp(`^start failed: ingest could not start: cannot reach the broker at 127.0.0.1:${port} \\(MQTT_URL\\)`),
    );
  });

  it('MQTT_URL naming something that accepts TCP but never answers MQTT fails within seconds, saying so', async () => {
    const silent = net.createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const port = (silent.address() as net.AddressInfo).port;
    try {
      const t0 = Date.now();
      const svc = spawnService(await testEnv({ MQTT_URL: `mqtt://127.0.0.1:${port}`, LOG_LEVEL: 'error' }));
      expect(await svc.exited).toBe(2);
      expect(Date.now() - t0).toBeLessThan(40_000);
      expect(startFailure(svc)).toBe(`start failed: ingest could not start: no MQTT answer from 127.0.0.1:${port} within 10 s (MQTT_URL)`);
    } finally {
      silent.close();
    }
  }, 60_000);
});
