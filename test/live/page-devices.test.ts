// The /live page lists every device of the tenant (issue 23: "lists a tenant's devices with their
// status"), whatever the API's page limits: it read one page of page_size=1000, so a tenant of
// more devices saw only the first 1,000, and with MAX_PAGE_SIZE below 1,000 (the request a 400)
// the page listed none. Here MAX_PAGE_SIZE=100 and 150 devices: every one is listed. Debian's
// chromium driven by playwright-core, as in page.test.ts (without the browser the test fails).
import crypto from 'node:crypto';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { http, tenantToken, useService } from '../helpers/service.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const svc = useService({ MQTT_URL: undefined, MAX_PAGE_SIZE: '100' });
let browser: Browser;
const DEVICES = 150;

beforeAll(async () => {
  if (!CHROMIUM) throw new Error('the /live page test needs chromium: apt-get install -y chromium');
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});
afterAll(() => browser?.close());

describe('the /live page device list', () => {
  it('lists every device of the tenant, over several pages, with MAX_PAGE_SIZE below 1,000', async () => {
    const tenant = `pages${crypto.randomBytes(3).toString('hex')}`;
    const token = await tenantToken(svc.base, svc.token, tenant);
    const user = await http('POST', `${svc.base}/auth/user`, {
      token: svc.token,
      body: { username: `${tenant}-viewer`, passwd: 'secret-pass', service: tenant, email: `${tenant}@example.com`, profile: 'user' },
    });
    expect(user.status).toBeLessThan(300);
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, {
      token,
      body: { label: 'thermo', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
    });
    const d = await http<DevicesCreated>('POST', `${svc.base}/device?count=${DEVICES}`, {
      token,
      body: { label: 'room', templates: [t.body.template.id] },
    });
    expect(d.body.devices).toHaveLength(DEVICES);

    const page = await browser.newPage();
    try {
      await page.goto(`${svc.base}/live`);
      await page.fill('#username', `${tenant}-viewer`);
      await page.fill('#passwd', 'secret-pass');
      await page.click('button[type=submit]');
      // The stream is opened once the list is loaded.
      await page
        .waitForFunction(`document.getElementById('conn')?.textContent === 'open'`, null, { timeout: 15_000 })
        .catch(() => undefined);
      // (a page-side expression as text: it runs in the browser, where `document` is)
      const listed = await page.evaluate<string[]>(`[...document.querySelectorAll('#devices li')].map((li) => li.dataset.id)`);
      expect(listed.sort()).toEqual(d.body.devices.map((x) => x.id).sort());
      expect(await page.textContent('#conn')).toBe('open');
    } finally {
      await page.close();
    }
  }, 120_000);
});
