// The /live page (docs/live.md §5) in a real headless browser: Debian's chromium driven by
// playwright-core. Log in with the API's user, open a device, publish over MQTT: the value and
// the chart change. Without the browser this test fails (it never skips): install it with
// `apt-get install -y chromium` (.ci/run does).
import { describe, expect, it } from 'vitest';
import { deviceClient } from '../helpers/registry-fixtures.js';
import { useService } from '../helpers/service.js';
import { logIn, thermometers, useBrowser, viewerTenant } from './page-fixtures.js';

const svc = useService({ MQTT_URL: undefined });
const browser = useBrowser();

describe('the /live page', () => {
  it('log in, open a device, see a published value and the chart change', async () => {
    const v = await viewerTenant(svc, 'page');
    const [id] = await thermometers(svc.base, v, 'kitchen');
    const tenant = v.tenant;

    const page = await browser().newPage();
    // Every request the page makes succeeds (its API reads, the stream).
    const failed: string[] = [];
    page.on('response', (r) => {
      if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`);
    });
    await logIn(page, svc.base, v);
    await page.waitForSelector(`#devices li[data-id="${id}"]`);
    expect(await page.textContent(`#devices li[data-id="${id}"] .status`)).toBe('offline');
    // (Page-side expressions as text: they run in the browser, where `document` is.)
    await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
    await page.click(`#devices li[data-id="${id}"]`);
    await page.waitForSelector('#detail:not([hidden])');

    const mqtt = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${id}` });
    try {
      await mqtt.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ temperature: 21.5 }), { qos: 1 });
      await page.waitForSelector('#attrs tr[data-attr="temperature"]');
      await page.waitForFunction(`document.querySelector('#attrs tr[data-attr="temperature"] td:nth-child(2)')?.textContent === '21.5'`);
      expect(await page.getAttribute('#chart', 'data-points')).toBe('1');
      // The device is online in the list now.
      await page.waitForFunction(`document.querySelector('#devices li[data-id="${id}"] .status')?.textContent === 'online'`);

      await mqtt.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ temperature: 23 }), { qos: 1 });
      await page.waitForFunction(`document.querySelector('#attrs tr[data-attr="temperature"] td:nth-child(2)')?.textContent === '23'`);
      expect(await page.getAttribute('#chart', 'data-points')).toBe('2');
      expect(await page.locator('#chart circle.point').count()).toBe(2);
      const line = await page.getAttribute('#series-line', 'd');
      expect(line).toMatch(/^M[\d.]+ [\d.]+ L[\d.]+ [\d.]+$/);
      expect(failed).toEqual([]);
    } finally {
      await mqtt.endAsync();
      await page.close();
    }
  }, 120_000);

  it('opened as /live/ it works the same: its requests go to the API root, not under /live/', async () => {
    const v = await viewerTenant(svc, 'slash');
    const [id] = await thermometers(svc.base, v, 'hall');
    const page = await browser().newPage();
    try {
      await logIn(page, svc.base, v, '/live/');
      await page.waitForSelector(`#devices li[data-id="${id}"]`);
      await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
    } finally {
      await page.close();
    }
  }, 60_000);
});
