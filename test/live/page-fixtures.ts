// What the /live page tests share: Debian's chromium driven by playwright-core (without it they
// fail, never skip: `apt-get install -y chromium`, as .ci/run does), a fresh tenant with a user
// to log in with and a thermometer template, and the page's login form.
import crypto from 'node:crypto';
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, expect } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { http, tenantToken } from '../helpers/service.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const PASSWORD = 'secret-pass';

/** A headless chromium for the file's tests: the returned function gives it once started. */
export function useBrowser(): () => Browser {
  let browser: Browser | undefined;
  beforeAll(async () => {
    if (!CHROMIUM) throw new Error('the /live page tests need chromium: apt-get install -y chromium');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  });
  afterAll(() => browser?.close());
  return () => {
    if (!browser) throw new Error('the browser has not started');
    return browser;
  };
}

export interface Viewer {
  tenant: string;
  /** The tenant's token, for the API calls of the test. */
  token: string;
  templateId: number;
}

/** A fresh tenant (`<prefix><hex>`), its user `<tenant>-viewer`, and a template `thermo` (temperature, float). */
export async function viewerTenant(svc: { base: string; token: string }, prefix: string): Promise<Viewer> {
  const tenant = `${prefix}${crypto.randomBytes(3).toString('hex')}`;
  const token = await tenantToken(svc.base, svc.token, tenant);
  const user = await http('POST', `${svc.base}/auth/user`, {
    token: svc.token,
    body: { username: `${tenant}-viewer`, passwd: PASSWORD, service: tenant, email: `${tenant}@example.com`, profile: 'user' },
  });
  expect(user.status).toBeLessThan(300);
  const t = await http<TemplateCreated>('POST', `${svc.base}/template`, {
    token,
    body: { label: 'thermo', attrs: [{ label: 'temperature', type: 'dynamic', value_type: 'float' }] },
  });
  return { tenant, token, templateId: t.body.template.id };
}

/** `count` devices of the viewer's template, labelled `label`; their ids. */
export async function thermometers(base: string, v: Viewer, label: string, count = 1): Promise<string[]> {
  const d = await http<DevicesCreated>('POST', `${base}/device${count > 1 ? `?count=${count}` : ''}`, {
    token: v.token,
    body: { label, templates: [v.templateId] },
  });
  expect(d.body.devices).toHaveLength(count);
  return d.body.devices.map((x) => x.id);
}

/** Opens the page at `path` and logs in as the viewer. */
export async function logIn(page: Page, base: string, v: Viewer, path = '/live'): Promise<void> {
  await page.goto(`${base}${path}`);
  await page.fill('#username', `${v.tenant}-viewer`);
  await page.fill('#passwd', PASSWORD);
  await page.click('button[type=submit]');
}
