// Will messages at the embedded broker (docs/credentials.md §3): aedes publishes a client's will
// when its connection ends without a DISCONNECT, through the same publish check as any message.
// A device's will on its own attrs topic is taken in; one on another device's topic is not; and
// a connection the registry closed (credential deleted, device removed) leaves no will behind,
// nor a refused "login" of its device in the metrics and the throttle (found by an audit: the
// will of a legacy topic was checked as a new login without a password, counted and logged).
import { beforeAll, describe, expect, it } from 'vitest';
import { http, useService } from '../helpers/service.js';
import { closedByPeer, eventually, historyCount } from '../helpers/registry-fixtures.js';
import { connect, deleteCredential, metricValue, newCredential, newDevice, type Tenant, twoTenants } from './fixtures.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const WILL = Buffer.from(JSON.stringify({ temperature: 42.5 }));
const refused = (reason: string) => `device_logins_refused_total{reason="${reason}"}`;

/** Every refusal count, to see that none moved. */
async function refusals(svc: Parameters<typeof metricValue>[0]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const reason of ['unknown_device', 'no_credential', 'wrong', 'expired', 'throttled'])
    out[reason] = await metricValue(svc, refused(reason));
  return out;
}

describe('will messages, MQTT_DEVICE_AUTH=required', () => {
  const svc = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required' });
  let a: Tenant;
  let b: Tenant;
  let url: string;

  beforeAll(async () => {
    ({ a, b, url } = await twoTenants(svc));
  });

  it("a device's will on its own attrs topic is taken in when its connection drops, in either layout", async () => {
    const d = await newDevice(svc, a);
    const cred = await newCredential(svc, a, d);
    for (const topic of [`${a.name}:${d}/attrs`, `/${a.name}/${d}/attrs`]) {
      const c = await connect(url, {
        username: `${a.name}:${d}`,
        password: cred.secret,
        will: { topic, payload: WILL, qos: 1, retain: false },
      });
      c.stream.destroy();
    }
    await eventually(async () => (await historyCount(svc.service.pool, a.name, d)) === 2 || undefined, 'both wills');
  });

  it("a will on another device's attrs topic, of its tenant or another, is not taken in", async () => {
    const d = await newDevice(svc, a);
    const cred = await newCredential(svc, a, d);
    const mine = await newDevice(svc, a);
    const theirs = await newDevice(svc, b);
    const topics = [`${a.name}:${mine}/attrs`, `/${a.name}/${mine}/attrs`, `${b.name}:${theirs}/attrs`, `/${b.name}/${theirs}/attrs`];
    for (const topic of topics) {
      for (const username of [`${a.name}:${d}`, '']) {
        const c = await connect(url, { username, password: cred.secret, will: { topic, payload: WILL, qos: 1, retain: true } });
        c.stream.destroy();
      }
    }
    await sleep(1500);
    expect(await historyCount(svc.service.pool, a.name, mine)).toBe(0);
    expect(await historyCount(svc.service.pool, b.name, theirs)).toBe(0);
  });

  it('a connection the registry closes leaves no will, and no refused login of its device (found by an audit)', async () => {
    for (const end of ['credential deleted', 'device removed'] as const) {
      for (const layout of ['default', 'legacy'] as const) {
        const d = await newDevice(svc, a);
        const cred = await newCredential(svc, a, d);
        const topic = layout === 'legacy' ? `/${a.name}/${d}/attrs` : `${a.name}:${d}/attrs`;
        const c = await connect(url, {
          username: `${a.name}:${d}`,
          password: cred.secret,
          will: { topic, payload: WILL, qos: 1, retain: false },
        });
        const closed = closedByPeer(c);
        const before = await refusals(svc);
        const res =
          end === 'credential deleted'
            ? await deleteCredential(svc, a, d, cred.id)
            : await http('DELETE', `${svc.base}/device/${d}`, { token: a.token });
        expect(res.status).toBe(200);
        await closed;
        c.end(true);
        await sleep(500);
        expect({ end, layout, refusals: await refusals(svc) }).toEqual({ end, layout, refusals: before });
        expect({ end, layout, stored: await historyCount(svc.service.pool, a.name, d) }).toEqual({ end, layout, stored: 0 });
      }
    }
  });
});
