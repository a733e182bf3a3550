// Ctrl-C in the terminal that runs `npm start` (README, "Run") sends SIGINT to the whole
// foreground process group, not to the service alone. The embedded PostgreSQL must not take it
// too: it would stop at once (fast shutdown) and end the connections the graceful shutdown
// (docs/operations.md §10) still needs, failing the requests in flight.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { http, login, loggedAddress, spawnService, type SpawnedService, zeroSetupEnv } from '../helpers/service.js';

let svc: SpawnedService | undefined;

// A failure may leave it running: SIGTERM, so that it stops its embedded PostgreSQL itself.
afterAll(async () => {
  if (svc?.child.exitCode !== null || svc.child.signalCode !== null) return;
  svc.child.kill('SIGTERM');
  await svc.exited;
});

it(
  'Ctrl-C (SIGINT to the process group): the request in flight is answered, no connection is cut, exit 0',
  { timeout: 90_000 },
  async () => {
    const env = await zeroSetupEnv();
    svc = spawnService(env, { processGroup: true });
    await svc.waitFor(/"msg":"ready"/, 60_000);
    const base = loggedAddress(await svc.waitFor(/public HTTP API listening/));
    const token = await login(base);
    const template = await http<TemplateCreated>('POST', `${base}/template`, {
      token,
      body: { label: 'ctrl-c', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
    });
    expect(template.status).toBe(200);

    // One transaction of ten thousand devices (a third of a second or more), under way when Ctrl-C comes.
    const bulk = http<DevicesCreated>('POST', `${base}/device?count=10000`, {
      token,
      body: { label: 'bulk', templates: [template.body.template.id] },
    });
    await new Promise((r) => setTimeout(r, 100));
    const shutdownFrom = svc.output.length;
    process.kill(-svc.child.pid!, 'SIGINT');

    const answer = await bulk;
    expect(answer.status, answer.text).toBe(200);
    expect(answer.body.devices).toHaveLength(10000);
    expect(await svc.exited).toBe(0);
    const shutdown = svc.output.slice(shutdownFrom).filter((l) => l.trim() !== '');
    expect(shutdown.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(['shutting down', 'stopped']);
    // The service stopped its PostgreSQL itself: none is left running.
    expect(fs.existsSync(path.join(env.DATA_DIR!, 'pg', 'postmaster.pid'))).toBe(false);
  },
);
