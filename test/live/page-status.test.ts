// The /live page's device status (issue 23: "lists a tenant's devices with their status"): a
// status change is shown whenever it happens, also while the list is being read. The page read
// the list first and opened the stream after it, so a device that came online in between was
// listed `offline` for good (the stream tells a change once, and an online device that keeps
// publishing has none to tell until its timeout runs out); and a list read again (after a
// `device` message) that was answered before a status change and reached the page after it
// put the older status back. Here the list's answer is held (playwright's route) while the
// device comes online. And a page that fell behind the stream (its messages dropped, then
// `lagged`) may have lost status messages: it reads the list again (it ignored `lagged`, and
// listed a device offline for good). Debian's chromium driven by playwright-core, as in page.test.ts (without
// the browser the test fails).
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { metricOf } from '../helpers/faults.js';
import { http, useService } from '../helpers/service.js';
import { logIn, thermometers, useBrowser, viewerTenant, type Viewer } from './page-fixtures.js';

const svc = useService({ MQTT_URL: undefined, LIVE_CLIENT_BUFFER_BYTES: '1024' });
const browser = useBrowser();

/** Publishes one value of `id` and waits until the service counts the device online. */
async function bringOnline(v: Viewer, id: string): Promise<void> {
  const mqtt = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${v.tenant}:${id}` });
  try {
    await mqtt.publishAsync(`${v.tenant}:${id}/attrs`, JSON.stringify({ temperature: 20 }), { qos: 1 });
  } finally {
    await mqtt.endAsync();
  }
  await eventually(async () => {
    const d = await http<{ status: string }>('GET', `${svc.base}/device/${id}?withStatus`, { token: v.token });
    return d.body.status === 'online' ? true : undefined;
  }, 'the device online');
}

/** The next answer of the device list is held: read from the service, then `during`, then given to the page. */
async function holdNextList(page: Page, during: () => Promise<void>): Promise<{ answered: Promise<void> }> {
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));
  let held = false;
  await page.route(/\/device\?withStatus/, async (route) => {
    if (held) return route.continue();
    held = true;
    const answer = await route.fetch();
    await during();
    await route.fulfill({ response: answer });
    done();
  });
  return { answered: finished };
}

const statusOf = (id: string) => `document.querySelector('#devices li[data-id="${id}"] .status')?.textContent`;

describe('the /live page device status', () => {
  it('a device that comes online while the list is first read is shown online', async () => {
    const v = await viewerTenant(svc, 'first');
    const [id] = await thermometers(svc.base, v, 'porch');
    const page = await browser().newPage();
    try {
      const { answered } = await holdNextList(page, () => bringOnline(v, id!));
      await logIn(page, svc.base, v);
      await answered;
      await page.waitForSelector(`#devices li[data-id="${id}"]`);
      // (it was listed offline for good: the status message came before the stream was open)
      await page.waitForFunction(`${statusOf(id!)} === 'online'`, null, { timeout: 10_000 });
    } finally {
      await page.close();
    }
  }, 120_000);

  it('a list read again that answers before a status change does not put the older status back', async () => {
    const v = await viewerTenant(svc, 'again');
    const [id] = await thermometers(svc.base, v, 'attic');
    const page = await browser().newPage();
    try {
      await logIn(page, svc.base, v);
      await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
      await page.waitForFunction(`${statusOf(id!)} === 'offline'`);
      // A device created: the page reads the list again; its answer (the attic offline) is held
      // until the attic's `status` `online` message has reached the page.
      const { answered } = await holdNextList(page, async () => {
        await bringOnline(v, id!);
        await page.waitForFunction(`${statusOf(id!)} === 'online'`);
      });
      const [other] = await thermometers(svc.base, v, 'shed');
      await answered;
      await page.waitForSelector(`#devices li[data-id="${other}"]`);
      // (the held answer put `offline` back, and no message would change it again)
      await page.waitForTimeout(500);
      expect(await page.evaluate<string>(statusOf(id!))).toBe('online');
    } finally {
      await page.close();
    }
  }, 120_000);
  it('a page that fell behind the stream, and lost a status message, shows the status all the same', async () => {
    const v = await viewerTenant(svc, 'lag');
    const [id] = await thermometers(svc.base, v, 'garage');
    const noisy = await http<{ template: { id: number } }>('POST', `${svc.base}/template`, {
      token: v.token,
      body: { label: 'noisy', attrs: [{ label: 'note', type: 'dynamic', value_type: 'string' }] },
    });
    const loud = await http<{ devices: { id: string }[] }>('POST', `${svc.base}/device`, {
      token: v.token,
      body: { label: 'loud', templates: [noisy.body.template.id] },
    });
    const loudId = loud.body.devices[0]!.id;
    const page = await browser().newPage();
    const mqtt = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${v.tenant}:${loudId}` });
    try {
      await logIn(page, svc.base, v);
      await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
      await page.waitForFunction(`${statusOf(id!)} === 'offline'`);
      // The page's script busy for 15 s: the browser stops reading its socket, the service's
      // buffer for it fills, and what comes meanwhile is dropped, the garage's `status` too.
      const busy = page.evaluate('(() => { const end = Date.now() + 15000; while (Date.now() < end); })()');
      const dropped = await metricOf(svc.base, 'live_messages_dropped_total');
      const note = 'x'.repeat(8000);
      for (let i = 0; i < 1500; i++) mqtt.publish(`${v.tenant}:${loudId}/attrs`, JSON.stringify({ note }), { qos: 0 });
      await eventually(
        async () => ((await metricOf(svc.base, 'live_messages_dropped_total')) > dropped + 10 ? true : undefined),
        'dropped',
      );
      await bringOnline(v, id!);
      await busy;
      await page.waitForFunction(`${statusOf(id!)} === 'online'`, null, { timeout: 10_000 });
    } finally {
      await mqtt.endAsync();
      await page.close();
    }
  }, 120_000);
});
