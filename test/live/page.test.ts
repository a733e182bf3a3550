// The /live page (docs/live.md §5) in a real headless browser: Debian's chromium driven by
// playwright-core. Log in with the API's user, open a device, publish over MQTT: the value and
// the chart change. Without the browser this test fails (it never skips): install it with
// `apt-get install -y chromium` (.ci/run does).
import crypto from 'node:crypto';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { deviceClient } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const svc = useService({ MQTT_URL: undefined });
let browser: Browser;

beforeAll(async () => {
  if (!CHROMIUM) throw new Error('the /live page test needs chromium: apt-get install -y chromium');
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});
afterAll(() => browser?.close());

describe('the /live page', () => {
  it('log in, open a device, see a published value and the chart change', async () => {
    const tenant = `page${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(svc.base, svc.token, tenant);
    // A user of that tenant to log in with.
    const user = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: `${tenant}-viewer`, passwd: 'secret-pass', service: tenant, email: `${tenant}@example.com`, profile: 'user' },
    });
    expect(user.status).toBeLessThan(300);
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, {
      token,
      body: { label: 'thermo', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
    });
    const d = await http<DevicesCreated>('POST', `${svc.base}/device`, {
      token,
      body: { label: 'kitchen', templates: [t.body.template.id] },
    });
    const id = d.body.devices[0]!.id;

    const page = await browser.newPage();
    // Every request the page makes succeeds (its API reads, the stream).
    const failed: string[] = [];
    page.on('response', (r) => {
      if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`);
    });
    await page.goto(`${svc.base}/live`);
    await page.fill('#username', `${tenant}-viewer`);
    await page.fill('#passwd', 'secret-pass');
    await page.click('button[type=submit]');
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
    const tenant = `slash${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(svc.base, svc.token, tenant);
    await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: `${tenant}-viewer`, passwd: 'secret-pass', service: tenant, email: `${tenant}@example.com`, profile: 'user' },
    });
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, {
      token,
      body: { label: 'thermo', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
    });
    const d = await http<DevicesCreated>('POST', `${svc.base}/device`, { token, body: { label: 'hall', templates: [t.body.template.id] } });
    const id = d.body.devices[0]!.id;
    const page = await browser.newPage();
    try {
      await page.goto(`${svc.base}/live/`);
      await page.fill('#username', `${tenant}-viewer`);
      await page.fill('#passwd', 'secret-pass');
      await page.click('button[type=submit]');
      await page.waitForSelector(`#devices li[data-id="${id}"]`);
      await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
    } finally {
      await page.close();
    }
  }, 60_000);
});
