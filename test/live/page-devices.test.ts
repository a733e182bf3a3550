// The /live page's device list and chosen device (issue 23: "lists a tenant's devices with their
// status", "shows the chosen device's attributes updating as messages arrive"). The list holds
// every device of the tenant, whatever the API's page limits: it read one page of page_size=1000, so a tenant of
// more devices saw only the first 1,000, and with MAX_PAGE_SIZE below 1,000 (the request a 400)
// the page listed none. Here MAX_PAGE_SIZE=100 and 150 devices: every one is listed. And a live
// value that arrives while the chosen device's history is being read stays the one shown (history
// overwrote it with an older value, and drew the chart's line back in time). Debian's
// chromium driven by playwright-core, as in page.test.ts (without the browser the test fails).
import { describe, expect, it } from 'vitest';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';
import { logIn, thermometers, useBrowser, viewerTenant } from './page-fixtures.js';

const svc = useService({ MQTT_URL: undefined, MAX_PAGE_SIZE: '100' });
const browser = useBrowser();
const DEVICES = 150;

describe('the /live page device list', () => {
  it('lists every device of the tenant, over several pages, with MAX_PAGE_SIZE below 1,000', async () => {
    const v = await viewerTenant(svc, 'pages');
    const ids = await thermometers(svc.base, v, 'room', DEVICES);

    const page = await browser().newPage();
    try {
      await logIn(page, svc.base, v);
      // The list is read once the stream is subscribed (page-status.test.ts): wait for it whole.
      await page
        .waitForFunction(`document.querySelectorAll('#devices li').length >= ${DEVICES}`, null, { timeout: 15_000 })
        .catch(() => undefined);
      // (a page-side expression as text: it runs in the browser, where `document` is)
      const listed = await page.evaluate<string[]>(`[...document.querySelectorAll('#devices li')].map((li) => li.dataset.id)`);
      expect(listed.sort()).toEqual(ids.sort());
      expect(await page.textContent('#conn')).toBe('open');
    } finally {
      await page.close();
    }
  }, 120_000);

  it('a live value that arrives before the history answer stays shown, and the chart stays in time order', async () => {
    const v = await viewerTenant(svc, 'race');
    const { tenant, token } = v;
    const [id] = await thermometers(svc.base, v, 'cellar');
    const mqtt = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${id}` });
    const page = await browser().newPage();
    try {
      // An older value, in history before the page opens.
      await mqtt.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ temperature: 10 }), { qos: 1 });
      await eventually(async () => {
        const h = await http<unknown[]>('GET', `${svc.base}/history/device/${id}/history?lastN=1&attr=temperature`, { token });
        return h.status === 200 && h.body.length === 1 ? true : undefined;
      }, 'the first value stored');
      await logIn(page, svc.base, v);
      await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
      // The history answer (the older value only) reaches the page after a newer live value did.
      await page.route('**/history/device/**', async (route) => {
        const answer = await route.fetch();
        await mqtt.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ temperature: 99 }), { qos: 1 });
        await page.waitForFunction(`document.querySelector('#attrs tr[data-attr="temperature"] td:nth-child(2)')?.textContent === '99'`);
        await route.fulfill({ response: answer });
      });
      await page.click(`#devices li[data-id="${id}"]`);
      await page.waitForFunction(`document.getElementById('chart')?.dataset.points === '2'`);
      expect(await page.textContent('#attrs tr[data-attr="temperature"] td:nth-child(2)')).toBe('99');
      // The line goes forward in time: M x1 y1 L x2 y2 with x1 < x2.
      const line = (await page.getAttribute('#series-line', 'd')) ?? '';
      const xs = [...line.matchAll(/[ML]([\d.]+) /g)].map((m) => Number(m[1]));
      expect(xs).toHaveLength(2);
      expect(xs[0]!).toBeLessThan(xs[1]!);
    } finally {
      await mqtt.endAsync();
      await page.close();
    }
  }, 120_000);
});
