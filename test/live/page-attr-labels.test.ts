// The /live page with attributes whose labels are names of Object.prototype's members
// (`constructor`, `toString`, `__proto__`): each is shown and charted as any other, and a
// device label of HTML is shown as text. Before (found by an audit), the page kept values in
// plain objects: a message with an attribute `constructor` threw in the page (the labels after
// it in the message were not shown either) and `toString`'s value never appeared.
import { describe, expect, it } from 'vitest';
import type { DevicesCreated, TemplateCreated } from '../helpers/api.js';
import { deviceClient } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';
import { logIn, useBrowser, viewerTenant } from './page-fixtures.js';

const svc = useService({ MQTT_URL: undefined });
const browser = useBrowser();

const cell = (label: string) => `document.querySelector('#attrs tr[data-attr="${label}"] td:nth-child(2)')?.textContent`;

describe('the /live page and attribute labels', () => {
  it('shows attributes named constructor, toString and __proto__, and an HTML device label as text', async () => {
    const v = await viewerTenant(svc, 'labels');
    const labels = ['constructor', 'toString', '__proto__', 'temperature'];
    const t = await http<TemplateCreated>('POST', `${svc.base}/template`, {
      token: v.token,
      body: { label: 'odd', attrs: labels.map((label) => ({ label, type: 'dynamic', value_type: 'float' })) },
    });
    expect(t.status).toBe(200);
    const html = '<img src=x onerror="window.__xss=1">';
    const d = await http<DevicesCreated>('POST', `${svc.base}/device`, {
      token: v.token,
      body: { label: html, templates: [t.body.template.id] },
    });
    const { id, label } = d.body.devices[0]!;
    expect(label.startsWith(html)).toBe(true);

    const page = await browser().newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    const mqtt = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${v.tenant}:${id}` });
    try {
      await logIn(page, svc.base, v);
      await page.waitForSelector(`#devices li[data-id="${id}"]`);
      expect(await page.textContent(`#devices li[data-id="${id}"] span:first-child`)).toBe(`${label} (${id})`);
      await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
      await page.click(`#devices li[data-id="${id}"]`);
      await page.waitForSelector('#detail:not([hidden])');

      await mqtt.publishAsync(`${v.tenant}:${id}/attrs`, '{"constructor": 1, "toString": 2, "__proto__": 3, "temperature": 4}', {
        qos: 1,
      });
      await page.waitForFunction(`${cell('temperature')} === '4'`, undefined, { timeout: 15_000 }).catch(() => undefined);
      const shown: Array<[string, unknown]> = [];
      for (const l of labels) shown.push([l, await page.evaluate(cell(l))]);
      expect(shown).toEqual([
        ['constructor', '1'],
        ['toString', '2'],
        ['__proto__', '3'],
        ['temperature', '4'],
      ]);
      const series = await page.evaluate(`[...document.querySelectorAll('#series option')].map((o) => o.value).sort()`);
      expect(series).toEqual([...labels].sort());
      expect(errors).toEqual([]);
      expect(await page.evaluate('window.__xss')).toBeUndefined();
    } finally {
      await mqtt.endAsync();
      await page.close();
    }
  }, 120_000);
});
