// SIGTERM while the database hangs (a frozen host: connections stay open, nothing is answered):
// the steps that would write to it (the last device status, the session hand-over, the pool)
// are cut at the end of SHUTDOWN_TIMEOUT_MS and the process exits 0 within it, instead of
// waiting for the hard stop. Nothing acknowledged is at stake: a message not committed was not
// acknowledged, and the broker delivers it again.
import mqtt from 'mqtt';
import { afterAll, expect, it } from 'vitest';
import { freezableProxy, type FreezableProxy } from '../helpers/faults.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { http, login, loggedAddress, spawnService, terminate, testEnv, type SpawnedService } from '../helpers/service.js';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';

let svc: SpawnedService | undefined;
let proxy: FreezableProxy | undefined;
afterAll(async () => {
  if (svc && svc.child.exitCode === null && svc.child.signalCode === null) svc.child.kill('SIGKILL');
  await proxy?.close();
});

it('SIGTERM with the database hung: exit 0 within SHUTDOWN_TIMEOUT_MS', async () => {
  const timeoutMs = 3000;
  const env = await testEnv({
    LOG_LEVEL: 'info',
    SHUTDOWN_TIMEOUT_MS: String(timeoutMs),
    // The device status seen below is still to be written when the shutdown begins.
    DEVICE_STATUS_FLUSH_MS: '60000',
  });
  proxy = await freezableProxy(env.DATABASE_URL!);
  svc = spawnService({ ...env, DATABASE_URL: proxy.url });
  await svc.waitFor(/"msg":"ready"/, 60_000);
  const base = loggedAddress(await svc.waitFor(/public HTTP API listening/));
  const token = await login(base);
  const t = await http<TemplateCreated>('POST', `${base}/template`, {
    token,
    body: { label: 'hung', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
  });
  const d = await http<DevicesCreated>('POST', `${base}/device`, { token, body: { label: 'hung', templates: [t.body.template.id] } });
  const id = d.body.devices[0]!.id;
  const device = await mqtt.connectAsync(env.MQTT_URL!, { username: `admin:${id}`, reconnectPeriod: 0, protocolVersion: 4 });
  await device.publishAsync(`admin:${id}/attrs`, JSON.stringify({ temperature: 20 }), { qos: 1 });
  await device.endAsync();
  await eventually(async () => {
    const h = await http<unknown[]>('GET', `${base}/history/device/${id}/history?lastN=1&attr=temperature`, { token });
    return h.status === 200 && h.body.length === 1 ? true : undefined;
  }, 'the value stored');

  proxy.freeze();
  // Bounded, so that a process that never exits fails here with its last lines, not by the test's timeout.
  const { code, ms } = await Promise.race([
    terminate(svc),
    new Promise<{ code: null; ms: number }>((r) => setTimeout(() => r({ code: null, ms: Infinity }), timeoutMs + 15_000)),
  ]);
  const cut = svc.output.filter((l) => l.includes('shutdown step cut')).map((l) => (JSON.parse(l) as { step: string }).step);
  console.log(`shutdown with the database hung: exit ${code} after ${ms} ms (budget ${timeoutMs}); steps cut: ${cut.join(', ') || 'none'}`);
  expect({ code, withinBudget: ms <= timeoutMs }, `exit ${code} after ${ms} ms:\n${svc.output.slice(-8).join('\n')}`).toEqual({
    code: 0,
    withinBudget: true,
  });
  expect(svc.output.some((l) => l.includes('shutdown timed out'))).toBe(false);
  // The start (embedded database, service) alone may take most of the default 30 s on a loaded host.
}, 120_000);
