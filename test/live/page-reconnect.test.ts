// The /live page when its stream ends (docs/live.md §5): the service restarts, so the stream
// closes (1001 `server shutting down`) and the service is away a while; the page opens the
// stream again by itself, and once subscribed reads the list and the chosen device's recent
// history afresh, so a value committed and a status changed while it was away are shown (the
// stream does not replay them). Before, the page showed `closed (1001 ...)` and nothing more
// until reloaded. A token that expires (close 4001) brings the login form back; logged in
// again, the page goes on with the same device. The page's reconnect is held (playwright's
// WebSocket route) until the test has published, so what it shows came from the re-reads.
// Debian's chromium driven by playwright-core, as in page.test.ts (without it the test fails).
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, terminate, testEnv, useService, useSpawnedServices, type ReadyService } from '../helpers/service.js';
import { logIn, thermometers, useBrowser, viewerTenant, type Viewer } from './page-fixtures.js';

const browser = useBrowser();

/** Publishes one temperature of `id` at QoS 1 (acknowledged: committed). */
async function publish(mqttPort: number, v: Viewer, id: string, temperature: number): Promise<void> {
  const mqtt = await deviceClient(`mqtt://127.0.0.1:${mqttPort}`, { username: `${v.tenant}:${id}` });
  try {
    await mqtt.publishAsync(`${v.tenant}:${id}/attrs`, JSON.stringify({ temperature }), { qos: 1 });
  } finally {
    await mqtt.endAsync();
  }
}

const shown = (value: string) => `document.querySelector('#attrs tr[data-attr="temperature"] td:nth-child(2)')?.textContent === '${value}'`;
const statusOf = (id: string) => `document.querySelector('#devices li[data-id="${id}"] .status')?.textContent`;
const connIs = (text: string) => `document.getElementById('conn')?.textContent === '${text}'`;

/** Routes the page's stream sockets through the test: each is counted; from the `from`th on, each waits for `release()`. */
async function holdReconnects(page: Page, from: number): Promise<{ opened: () => number; release: () => void }> {
  let opened = 0;
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  await page.routeWebSocket(/\/stream$/, async (ws) => {
    opened++;
    if (opened >= from) await released;
    ws.connectToServer();
  });
  return { opened: () => opened, release };
}

describe('the /live page reconnects', () => {
  const spawned = useSpawnedServices();

  it('after the service restarts: the stream opens again, and what came meanwhile is shown', async () => {
    const env = await testEnv({
      MQTT_URL: undefined,
      PORT: String(await freePort()),
      MQTT_PORT: String(await freePort()),
      LOG_LEVEL: 'info',
    });
    const mqttPort = Number(env.MQTT_PORT);
    let running: ReadyService = await spawned.ready(env);
    const base = running.base;
    const admin = await http<{ jwt: string }>('POST', `${base}/auth`, { body: { username: 'admin', passwd: 'admin' } });
    const v = await viewerTenant({ base, token: admin.body.jwt }, 'again');
    const [id] = await thermometers(base, v, 'porch');

    const page = await browser().newPage();
    try {
      const sockets = await holdReconnects(page, 2);
      await logIn(page, base, v);
      await page.waitForFunction(connIs('open'));
      await page.waitForSelector(`#devices li[data-id="${id}"]`);
      await page.click(`#devices li[data-id="${id}"]`);
      await page.waitForSelector('#detail:not([hidden])');
      await publish(mqttPort, v, id!, 21);
      await page.waitForFunction(shown('21'));
      // Online now; it goes offline with the restart (its connection ends), and comes back below.
      await page.waitForFunction(`${statusOf(id!)} === 'online'`);

      // The service stops: the page says so and that it will reconnect.
      expect((await terminate(running.svc)).code).toBe(0);
      await page.waitForFunction(
        `/^closed \\(1001 server shutting down\\), reconnecting in \\d+ s$/.test(document.getElementById('conn')?.textContent ?? '')`,
      );

      // Back, on the same ports and database; the page's next socket is held while a value is committed.
      running = await spawned.ready(env);
      await eventually(() => (sockets.opened() >= 2 ? true : undefined), 'the page reconnecting', 60_000);
      await publish(mqttPort, v, id!, 23.5);
      sockets.release();

      await page.waitForFunction(connIs('open'), undefined, { timeout: 60_000 });
      // Committed while the stream was away: read from history once subscribed again, and the
      // device's status (online again, no status message reached the page) from the list.
      await page.waitForFunction(shown('23.5'));
      await page.waitForFunction(`${statusOf(id!)} === 'online'`);
      expect(await page.getAttribute('#chart', 'data-points')).toBe('2');

      // The stream goes on: a later value arrives as a message.
      await publish(mqttPort, v, id!, 25);
      await page.waitForFunction(shown('25'));
      expect(await page.getAttribute('#chart', 'data-points')).toBe('3');
    } finally {
      await page.close();
      await terminate(running.svc);
    }
  }, 240_000);
});

describe('the /live page when the token expires', () => {
  const svc = useService({ MQTT_URL: undefined, TOKEN_TTL_SECONDS: '6' });

  it('shows the login form again; logged in again, it goes on with the device chosen', async () => {
    const v = await viewerTenant(svc, 'expiry');
    const [id] = await thermometers(svc.base, v, 'shed');
    const page = await browser().newPage();
    try {
      await logIn(page, svc.base, v);
      await page.waitForFunction(connIs('open'));
      await page.click(`#devices li[data-id="${id}"]`);
      await page.waitForSelector('#detail:not([hidden])');

      // Closed with 4001 when the token expires: no reconnecting with it, the form instead.
      await page.waitForFunction(connIs('closed (4001 token expired)'), undefined, { timeout: 20_000 });
      await page.waitForSelector('#login:not([hidden])');
      expect(await page.textContent('#login-error')).toBe('session expired: log in again');

      await publish(svc.service.mqttPort!, v, id!, 19.5);
      await page.click('button[type=submit]'); // the form keeps user and password
      await page.waitForFunction(connIs('open'));
      await page.waitForSelector('#login[hidden]', { state: 'attached' });
      await page.waitForFunction(shown('19.5'));
      await page.waitForFunction(`${statusOf(id!)} === 'online'`);
    } finally {
      await page.close();
    }
  }, 120_000);
});
