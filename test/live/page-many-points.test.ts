// The /live page's chart with a busy device: more points in its five minutes than a JavaScript
// call takes arguments (150,000 values, read from history on choosing the device). The chart is
// drawn (at most 600 of them, the y axis from all), and nothing throws. Before (found by a
// review), the y axis was Math.min(...points): RangeError, no chart at all; and points older than
// the window were never dropped, so a tab left open kept every value it had ever received.
import { describe, expect, it } from 'vitest';
import { useService } from '../helpers/service.js';
import { logIn, thermometers, useBrowser, viewerTenant } from './page-fixtures.js';

const POINTS = 150_000;
const svc = useService({ MQTT_URL: undefined, HISTORY_MAX_RESULTS: '200000' });
const browser = useBrowser();

describe('the /live page with a busy device', () => {
  it(`charts ${POINTS.toLocaleString('en')} values of the last minutes`, async () => {
    const v = await viewerTenant(svc, 'busy');
    const [id] = await thermometers(svc.base, v, 'busy');
    // Every 1.8 ms over the last 270 s, the values 0, 1, 2, ... (the largest, 149,999, the newest).
    await svc.service.pool.query(
      `INSERT INTO history (tenant, device_id, attr, series, ts, value)
       SELECT $1, $2, 'temperature', history_series($1, $2, 'temperature'), now() - interval '270 s' + g * interval '1.8 ms', g::text
         FROM generate_series(0, $3::int - 1) g`,
      [v.tenant, id, POINTS],
    );

    const page = await browser().newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    try {
      await logIn(page, svc.base, v);
      await page.click(`#devices li[data-id="${id}"]`);
      await page
        .waitForFunction(`document.getElementById('chart')?.dataset.points === '${POINTS}'`, undefined, { timeout: 30_000 })
        .catch(() => undefined);
      const chart = await page.evaluate<{ points: string; drawn: number; axis: string[] }>(`({
        points: document.getElementById('chart').dataset.points,
        drawn: document.querySelectorAll('#chart circle.point').length,
        axis: [...document.querySelectorAll('#chart text')].map((t) => t.textContent),
      })`);
      expect({ errors, chart: { ...chart, drawn: chart.drawn > 500 && chart.drawn <= 600 } }).toEqual({
        errors: [],
        chart: { points: String(POINTS), drawn: true, axis: [String(POINTS - 1), '0'] },
      });
    } finally {
      await page.close();
    }
  }, 120_000);
});
