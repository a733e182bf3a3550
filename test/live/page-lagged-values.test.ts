// The /live page after it fell behind the stream (issue 23: "shows the chosen device's
// attributes updating as messages arrive"): a page whose messages were dropped (then `lagged`)
// may have lost the chosen device's values; it reads that device's recent history again, so it
// shows the device's latest value and its points in the chart. Before (found by an audit), it
// read the device list only: the value shown stayed the one before the lag, for good if the
// device said nothing more, and the chart kept a gap. Debian's chromium driven by
// playwright-core, as in page.test.ts (without the browser the test fails).
import { describe, expect, it } from 'vitest';
import { metricOf } from '../helpers/faults.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, useService } from '../helpers/service.js';
import { logIn, thermometers, useBrowser, viewerTenant } from './page-fixtures.js';

const svc = useService({ MQTT_URL: undefined, LIVE_CLIENT_BUFFER_BYTES: '1024' });
const browser = useBrowser();

const shown = `document.querySelector('#attrs tr[data-attr="temperature"] td:nth-child(2)')?.textContent`;

describe('the /live page after it fell behind the stream', () => {
  it("shows the chosen device's value committed while its messages were dropped", async () => {
    const v = await viewerTenant(svc, 'lagval');
    const [id] = await thermometers(svc.base, v, 'porch');
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
    const porch = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${v.tenant}:${id}` });
    const noise = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${v.tenant}:${loudId}` });
    try {
      await logIn(page, svc.base, v);
      await page.waitForFunction(`document.getElementById('conn')?.textContent === 'open'`);
      await page.click(`#devices li[data-id="${id}"]`);
      await page.waitForSelector('#detail:not([hidden])');
      await porch.publishAsync(`${v.tenant}:${id}/attrs`, JSON.stringify({ temperature: 20 }), { qos: 1 });
      await page.waitForFunction(`${shown} === '20'`);

      // The page's script busy for 15 s: the browser stops reading its socket, the service's
      // buffer for it fills, and what comes meanwhile is dropped, the porch's 42 too.
      const busy = page.evaluate('(() => { const end = Date.now() + 15000; while (Date.now() < end); })()');
      const dropped = await metricOf(svc.base, 'live_messages_dropped_total');
      const note = 'x'.repeat(8000);
      for (let i = 0; i < 1500; i++) noise.publish(`${v.tenant}:${loudId}/attrs`, JSON.stringify({ note }), { qos: 0 });
      await eventually(
        async () => ((await metricOf(svc.base, 'live_messages_dropped_total')) > dropped + 10 ? true : undefined),
        'dropped',
      );
      const before = await metricOf(svc.base, 'live_messages_dropped_total');
      await porch.publishAsync(`${v.tenant}:${id}/attrs`, JSON.stringify({ temperature: 42 }), { qos: 1 });
      // (acknowledged once committed; its `attrs` message is among those dropped)
      await eventually(
        async () => ((await metricOf(svc.base, 'live_messages_dropped_total')) > before ? true : undefined),
        'the 42 dropped',
      );
      await busy;
      await page.waitForFunction(`${shown} === '42'`, null, { timeout: 15_000 });
      await page.waitForFunction(`document.getElementById('chart')?.dataset.points === '2'`, null, { timeout: 5_000 });
      expect(await page.getAttribute('#chart', 'data-points')).toBe('2');
    } finally {
      await porch.endAsync();
      await noise.endAsync();
      await page.close();
    }
  }, 120_000);
});
