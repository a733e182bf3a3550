// Logs (pino): secrets redacted at the configured paths, errors with their stack, the pretty
// format on one line; and over HTTP, the request id: taken from X-Request-Id or made, echoed in
// the answer, and on the request's log lines.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import WebSocket from 'ws';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger, REDACT_PATHS, REDACTED, type LogFormat } from '../../src/log.js';
import { http, loggedAddress, login, spawnService, tempDir, testEnv, type SpawnedService } from '../helpers/service.js';

function capture(format: LogFormat = 'json', level: 'debug' | 'info' = 'debug') {
  const lines: string[] = [];
  return { log: createLogger(level, { component: 'test' }, { format, write: (l) => lines.push(l) }), lines };
}

/** An object with `value` at a redact path (`*` stands for any field: `anything`). */
function at(path: string, value: string): Record<string, unknown> {
  const parts = path.split('.').map((p) => (p === '*' ? 'anything' : p));
  const out: Record<string, unknown> = {};
  let node = out;
  for (const p of parts.slice(0, -1)) node = node[p] = {};
  node[parts.at(-1)!] = value;
  return out;
}

describe('log redaction', () => {
  it('every configured path is redacted, top-level and one level down, whatever else the line holds', () => {
    expect(REDACT_PATHS.length).toBeGreaterThan(20);
    for (const path of REDACT_PATHS) {
      const { log, lines } = capture();
      const secret = `s3cret-${crypto.randomBytes(8).toString('hex')}`;
      log.info('with a secret', { ...at(path, secret), kept: 'visible' });
      expect(lines).toHaveLength(1);
      expect(lines[0], path).not.toContain(secret);
      expect(lines[0], path).toContain(REDACTED);
      expect((JSON.parse(lines[0]!) as { kept: unknown }).kept).toBe('visible');
    }
  });

  it('the fields that name secrets today (passwords, tokens, keys, authorization) are among them', () => {
    for (const field of [
      'password',
      'passwd',
      'secret',
      'token',
      'jwt',
      'psk',
      'key',
      'authorization',
      'jwtSecret',
      'pskEncryptionKey',
      'adminPassword',
    ]) {
      expect(REDACT_PATHS).toContain(field);
      expect(REDACT_PATHS).toContain(`*.${field}`);
    }
    expect(REDACT_PATHS).toContain('headers.authorization');
  });

  it('child loggers and the pretty format redact too', () => {
    const { log, lines } = capture('pretty');
    log
      .child({ requestId: 'r1', token: 'child-token-value' })
      .warn('pretty', { password: 'pretty-password', nested: { psk: 'pretty-psk' } });
    expect(lines).toHaveLength(1);
    for (const secret of ['child-token-value', 'pretty-password', 'pretty-psk']) expect(lines[0]).not.toContain(secret);
  });
});

describe('log lines', () => {
  it('JSON: ts (ISO 8601), level by name, msg, then the fields; errors with message and stack', () => {
    const { log, lines } = capture();
    log.error('failed', { error: new Error('boom'), tenant: 't1' });
    const line = JSON.parse(lines[0]!) as { ts: string; error: { stack: string } };
    expect(line).toMatchObject({
      level: 'error',
      msg: 'failed',
      component: 'test',
      tenant: 't1',
      error: { type: 'Error', message: 'boom' },
    });
    expect(line.ts).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(line.error.stack).toContain('Error: boom');
  });

  it('pretty: one line per event, the time, the level, the message and the fields', () => {
    const { log, lines } = capture('pretty');
    log.info('hello there', { tenant: 't1', device: 'a1b2c3' });
    expect(lines).toHaveLength(1);
    const plain = stripVTControlCharacters(lines[0]!);
    expect(plain.trimEnd().split('\n')).toHaveLength(1);
    expect(plain).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: hello there/);
    expect(plain).toContain('"a1b2c3"');
  });

  // pino-pretty wrote an error's stack over several lines, its message's line breaks and escape
  // sequences as they were (a message holding "\n[12:00:00.000] INFO: ..." read as a line of its own).
  it('pretty: an error stays on its line, stack included, its control characters escaped', () => {
    const { log, lines } = capture('pretty');
    log.error('request failed', { requestId: 'r-1', error: new Error('boom\n[12:00:00.000] INFO: forged \u001b[2J') });
    expect(lines).toHaveLength(1);
    expect(lines[0]!.trimEnd().split('\n')).toHaveLength(1);
    expect(lines[0]).not.toContain('\u001b[2J');
    const plain = stripVTControlCharacters(lines[0]!);
    expect(plain).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] ERROR: request failed/);
    expect(plain).toContain('"requestId":"r-1"');
    expect(plain).toContain('Error: boom\\n[12:00:00.000] INFO: forged \\u001b[2J\\n    at ');
  });

  it('below the level nothing is written', () => {
    const { log, lines } = capture('json', 'info');
    log.debug('not written');
    expect(lines).toEqual([]);
  });
});

describe('an uncaught exception', () => {
  it("is one JSON log line with its stack, and the process exits 1 (not Node's multi-line report on stderr)", async () => {
    // A module loaded before the service (NODE_OPTIONS --import) throws from a signal handler:
    // nothing outside can make the service throw, so the test brings the throw with it.
    const dir = await tempDir();
    const thrower = path.join(dir, 'thrower.mjs');
    await fs.writeFile(thrower, "process.on('SIGUSR2', () => { throw new Error('thrown from outside'); });\n");
    const svc = spawnService(await testEnv({ LOG_LEVEL: 'info', NODE_OPTIONS: `--import=${thrower}` }));
    try {
      await svc.waitFor(/"msg":"ready"/, 60_000);
      svc.child.kill('SIGUSR2');
      expect(await svc.exited).toBe(1);
      const lines = svc.output.filter((l) => l.trim() !== '');
      for (const line of lines) expect(() => JSON.parse(line) as unknown, line).not.toThrow();
      const last = JSON.parse(lines.at(-1)!) as { level: string; msg: string; error: { message: string; stack: string } };
      expect(last.level).toBe('error');
      expect(last.msg).toBe('uncaught exception; exiting');
      expect(last.error.message).toBe('thrown from outside');
      expect(last.error.stack).toContain('thrower.mjs');
    } finally {
      if (svc.child.exitCode === null) svc.child.kill('SIGKILL');
    }
  });
});

describe('request ids', () => {
  const spawned: SpawnedService[] = [];
  afterAll(() => {
    for (const s of spawned) if (s.child.exitCode === null) s.child.kill('SIGKILL');
  });

  it('X-Request-Id is taken when usable, made otherwise, echoed in the answer and carried by the request log lines', async () => {
    const svc = spawnService(await testEnv({ LOG_LEVEL: 'debug' }));
    spawned.push(svc);
    await svc.waitFor(/"msg":"ready"/, 60_000);
    const base = loggedAddress(await svc.waitFor(/public HTTP API listening/));

    const given = await http('GET', `${base}/health`, { headers: { 'x-request-id': 'trace-42.a/b' } });
    expect(given.headers.get('x-request-id')).toBe('trace-42.a/b');
    const made = await http('GET', `${base}/template`);
    const madeId = made.headers.get('x-request-id')!;
    expect(madeId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    // Unusable (blank inside, or too long): replaced by one of ours.
    for (const bad of ['two words', 'x'.repeat(129)]) {
      const res = await http('GET', `${base}/health`, { headers: { 'x-request-id': bad } });
      expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    }
    const other = await http('GET', `${base}/health`);
    expect(other.headers.get('x-request-id')).not.toBe(madeId);
    // The live stream's own handlers too: the page, a refused stream, a refused WebSocket upgrade.
    const page = await http('GET', `${base}/live`, { headers: { 'x-request-id': 'live-page' } });
    expect([page.status, page.headers.get('x-request-id')]).toEqual([200, 'live-page']);
    const sse = await http('GET', `${base}/stream`, { headers: { accept: 'text/event-stream', 'x-request-id': 'live-sse' } });
    expect([sse.status, sse.headers.get('x-request-id')]).toEqual([401, 'live-sse']);
    const upgrade = await new Promise<[number | undefined, unknown]>((resolve, reject) => {
      const ws = new WebSocket(`${base.replace('http', 'ws')}/stream?token=nope`, { headers: { 'x-request-id': 'live-ws' } });
      ws.on('unexpected-response', (_req, res) => {
        resolve([res.statusCode, res.headers['x-request-id']]);
        res.resume();
        ws.terminate();
      });
      ws.on('error', reject);
    });
    expect(upgrade).toEqual([401, 'live-ws']);
    // An accepted WebSocket upgrade: its 101 echoes the id as every other answer does (before,
    // found by an audit, uWebSockets.js's 101 went out without it).
    const token = await login(base);
    const accepted = await new Promise<[number | undefined, unknown]>((resolve, reject) => {
      const ws = new WebSocket(`${base.replace('http', 'ws')}/stream?token=${token}`, { headers: { 'x-request-id': 'live-ws-open' } });
      ws.on('upgrade', (res) => resolve([res.statusCode, res.headers['x-request-id']]));
      ws.on('open', () => ws.close());
      ws.on('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      ws.on('error', reject);
    });
    expect(accepted).toEqual([101, 'live-ws-open']);
    // A broker's login hook (internal listener): the login's own lines carry the request's id.
    const internal = loggedAddress(await svc.waitFor(/internal HTTP API listening/));
    const hook = await http<{ result: string }>('POST', `${internal}/broker/emqx/authenticate`, {
      headers: { 'x-request-id': 'hook-1' },
      body: { clientid: 'c1', username: 'admin:ffffff', password: 'guess', peerhost: '127.0.0.1' },
    });
    expect([hook.status, hook.body.result, hook.headers.get('x-request-id')]).toEqual([200, 'deny', 'hook-1']);
    const metrics = (await http('GET', `${base}/metrics`)).text;
    expect(metrics).toMatch(/http_requests_total\{method="GET",route="\/live",status="200"\} 1/);
    expect(metrics).toMatch(/http_requests_total\{method="GET",route="\/stream",status="401"\} 2/);

    svc.child.kill('SIGTERM');
    expect(await svc.exited).toBe(0);
    const lines = svc.output.map((l) => JSON.parse(l) as Record<string, unknown>);
    const byId = (id: string) => lines.filter((l) => l.requestId === id);
    expect(byId('trace-42.a/b')).toEqual([
      expect.objectContaining({ level: 'debug', msg: 'request', method: 'GET', path: '/health', status: 200 }),
    ]);
    expect(byId(madeId)).toEqual([expect.objectContaining({ msg: 'request', path: '/template', status: 401 })]);
    for (const [id, path, status] of [
      ['live-page', '/live', 200],
      ['live-sse', '/stream', 401],
      ['live-ws', '/stream', 401],
      ['live-ws-open', '/stream', 101],
    ] as const)
      expect(byId(id)).toEqual([expect.objectContaining({ msg: 'request', path, status })]);
    expect(byId('hook-1').map((l) => l.msg)).toEqual(expect.arrayContaining(['device login refused', 'request']));
    // Every request line carries an id.
    const requestLines = lines.filter((l) => l.msg === 'request');
    expect(requestLines.length).toBeGreaterThanOrEqual(5);
    for (const l of requestLines) expect(typeof l.requestId).toBe('string');
  }, 60_000);
});
