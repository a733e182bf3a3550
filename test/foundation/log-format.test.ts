// The log format: every output line of a real process is one JSON object with ts, level and msg,
// at the default level and at LOG_LEVEL=warn; every line of every thread names the service.
import { stripVTControlCharacters } from 'node:util';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../../src/net.js';
import type { TemplateList } from '../helpers/api.js';
import { parseLogLines } from '../helpers/log-lines.js';
import { timescaleLayout } from '../helpers/history-layout.js';
import { freshDatabase, http, login, startFailure, terminate, testEnv, useSpawnedServices, zeroSetupEnv } from '../helpers/service.js';

const spawned = useSpawnedServices();

describe('log format', () => {
  it('a zero-setup start, a few requests and a shutdown: every output line is one JSON object with ts, level and msg', async () => {
    const { svc, base } = await spawned.ready(await zeroSetupEnv(), 90_000);
    const token = await login(base);
    await http('GET', `${base}/health`);
    await http<TemplateList>('GET', `${base}/template`, { token });
    await http('GET', `${base}/no/such/route`, { token });
    await http<TemplateList>('GET', `${base}/template`, { token: 'not.a.token' });
    await http('POST', `${base}/auth`, { body: { username: 'admin', passwd: 'wrong' } });
    await http('POST', `${base}/auth`, { rawBody: 'junk', headers: { 'content-type': 'application/json' } });
    const { code } = await terminate(svc);
    expect(code).toBe(0);
    const entries = parseLogLines(svc.output);
    const msgs = entries.map((e) => e.msg);
    for (const msg of [
      'initialising embedded PostgreSQL',
      'embedded PostgreSQL listening',
      'embedded MQTT broker listening',
      'public HTTP API listening',
      'internal HTTP API listening',
      'ready',
      'shutting down',
      'stopped',
    ]) {
      expect(msgs).toContain(msg);
    }
    // The default level is info: no debug lines.
    expect(entries.filter((e) => e.level === 'debug')).toEqual([]);
    // Every thread's lines name the service (the router thread's too: it hosts the embedded broker).
    expect(msgs).toContain('embedded MQTT broker listening');
    expect(entries.filter((e) => e.service !== 'device-registry')).toEqual([]);
  }, 120_000);

  it('LOG_LEVEL=warn: warnings are written, info lines are not', async () => {
    // A first start lays the history table out with one chunk interval; the second start, at
    // warn, is given another one, which it reports with a warning: on plain PostgreSQL that the
    // partitions keep their interval; on TimescaleDB, where new chunks take the new interval,
    // that at the rate of the values written so far a chunk's index would outgrow shared_buffers.
    const timescale = await timescaleLayout();
    const env = await testEnv({ LOG_LEVEL: 'info', HISTORY_CHUNK_INTERVAL: timescale ? '1 hour' : '1 day' });
    const first = await spawned.ready(env);
    if (timescale) {
      const db = new pg.Client({ connectionString: env.DATABASE_URL });
      await db.connect();
      await db.query(
        `INSERT INTO history (tenant, device_id, attr, series, ts, value)
         SELECT 'w', 'd' || i, 'v', history_series('w', 'd' || i, 'v'), date_trunc('hour', now()) - interval '1 hour' + (i % 3600) * interval '1 second', '1'
           FROM generate_series(1, 20000) i`,
      );
      await db.end();
    }
    expect((await terminate(first.svc)).code).toBe(0);
    expect(first.svc.output.some((l) => l.includes('"level":"info"'))).toBe(true);

    const port = await freePort();
    const second = spawned.spawn({
      ...env,
      LOG_LEVEL: 'warn',
      HISTORY_CHUNK_INTERVAL: timescale ? '366 days' : '2 days',
      PORT: String(port),
    });
    await second.waitFor(
      timescale ? /HISTORY_CHUNK_INTERVAL makes the current chunk's index larger than shared_buffers/ : /HISTORY_CHUNK_INTERVAL differs/,
    );
    // At warn the service does not say it is ready: it is once it answers.
    const base = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    for (;;) {
      const up = await http('GET', `${base}/health`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (up) break;
      if (Date.now() > deadline) throw new Error(`not answering at ${base}:\n${second.output.join('\n')}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const token = await login(base);
    expect((await http<TemplateList>('GET', `${base}/template`, { token })).status).toBe(200);
    expect((await http('GET', `${base}/no/such/route`, { token })).status).toBe(404);
    expect((await terminate(second)).code).toBe(0);
    const entries = parseLogLines(second.output);
    expect(entries.some((e) => e.level === 'warn')).toBe(true);
    expect(entries.filter((e) => e.level === 'info' || e.level === 'debug')).toEqual([]);
  }, 90_000);

  // Node.js writes its process warnings itself, several plain lines on stderr, unless the service
  // takes them. Before, a DATABASE_URL with sslmode=require (pg's 'SECURITY WARNING', 8 lines) or
  // an mqtts:// MQTT_URL naming an IP address (DEP0123, from the ingest thread, 2 lines) put
  // plain text before the one line of a failed start, in either format (seen by an audit).
  it('a Node.js warning is one log line of the format, also from the ingest thread: JSON', async () => {
    const viaSsl = spawned.spawn(await testEnv({ LOG_LEVEL: 'warn', DATABASE_URL: `${await freshDatabase()}?sslmode=require` }));
    expect(await viaSsl.exited).toBe(2);
    const ssl = parseLogLines(viaSsl.output);
    expect(startFailure(viaSsl)).toMatch(/^start failed: cannot use the database .*\(DATABASE_URL\)/);
    expect(ssl.filter((e) => e.level === 'warn').map((e) => e.msg)).toEqual([
      expect.stringMatching(/^Warning: SECURITY WARNING: The SSL modes/),
    ]);
    const mqtts = spawned.spawn(await testEnv({ LOG_LEVEL: 'warn', MQTT_URL: inject('mqttUrl').replace(/^mqtt:/, 'mqtts:') }));
    expect(await mqtts.exited).toBe(2);
    const tls = parseLogLines(mqtts.output);
    expect(startFailure(mqtts)).toMatch(/^start failed: ingest could not start: cannot reach the broker/);
    const warnings = tls.filter((e) => e.level === 'warn');
    expect(warnings.map((e) => [e.component, e.code])).toEqual([['ingest', 'DEP0123']]);
    expect(warnings[0]!.msg).toMatch(/^DeprecationWarning: Setting the TLS ServerName/);
  }, 90_000);

  it('a Node.js warning is one log line of the format: pretty', async () => {
    const svc = spawned.spawn(
      await testEnv({ LOG_LEVEL: 'warn', LOG_FORMAT: 'pretty', MQTT_URL: inject('mqttUrl').replace(/^mqtt:/, 'mqtts:') }),
    );
    expect(await svc.exited).toBe(2);
    const lines = svc.output.filter((l) => l.trim() !== '').map((l) => stripVTControlCharacters(l));
    expect(lines).toEqual([
      expect.stringMatching(/^\[\d\d:\d\d:\d\d\.\d{3}\] WARN: DeprecationWarning: Setting the TLS ServerName/),
      expect.stringMatching(/^\[\d\d:\d\d:\d\d\.\d{3}\] ERROR: start failed: ingest could not start: cannot reach the broker/),
    ]);
  }, 90_000);
});
