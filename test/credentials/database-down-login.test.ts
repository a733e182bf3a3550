// Embedded broker, the database unreachable (docs/credentials.md §3): a device whose credentials
// are not cached cannot be checked and is refused, fail closed, with CONNACK "server unavailable"
// (3.1.1 code 3, MQTT 5 0x88), and `device login check failed` is logged with the tenant and the
// device the client named, however it named it (username, or the legacy client id), in both
// protocol versions (found by a review: the legacy client id's line named no device, and an MQTT 5
// client's refusal was not logged at all).
import mqtt from 'mqtt';
import { beforeAll, expect, it } from 'vitest';
import { takeDatabaseAway } from '../helpers/faults.js';
import { parseLogLines } from '../helpers/log-lines.js';
import { loggedAddress, login, testEnv, useSpawnedServices, type SpawnedService } from '../helpers/service.js';
import { connackCode, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

const spawned = useSpawnedServices();
let proc: SpawnedService;
let url: string;
let t: Tenant;
let withCredential: string;
let secret: string;
let without: string;

beforeAll(async () => {
  const env = await testEnv({ MQTT_URL: undefined, LOG_LEVEL: 'info', MQTT_DEVICE_AUTH: 'optional' });
  const ready = await spawned.ready(env, 90_000);
  proc = ready.svc;
  url = loggedAddress(await proc.waitFor(/embedded MQTT broker listening/));
  const api = { base: ready.base, token: await login(ready.base) };
  t = await newTenant(api);
  withCredential = await newDevice(api, t);
  without = await newDevice(api, t);
  secret = (await newCredential(api, t, withCredential)).secret;
  // Nothing of these devices has been looked up by a login: the database is needed for each.
  await takeDatabaseAway(env.DATABASE_URL!);
}, 120_000);

/** The `device login check failed` lines logged so far. */
const failures = () => parseLogLines(proc.output).filter((l) => l.msg === 'device login check failed; connection refused');

async function connackV5(opts: mqtt.IClientOptions): Promise<number> {
  try {
    const c = await mqtt.connectAsync(url, { protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 10_000, ...opts });
    await c.endAsync(true);
    return 0;
  } catch (err) {
    return (err as { code: number }).code;
  }
}

it('MQTT 3.1.1, a username and password: "server unavailable" (3), logged with the tenant and device', async () => {
  const before = failures().length;
  expect(await connackCode(url, { username: `${t.name}:${withCredential}`, password: secret })).toBe(3);
  expect(failures().slice(before)).toEqual([expect.objectContaining({ tenant: t.name, device: withCredential })]);
});

it('MQTT 3.1.1, the legacy client id `<tenant>:<device>` alone: refused the same way, logged with the device it names', async () => {
  const before = failures().length;
  expect(await connackCode(url, { clientId: `${t.name}:${without}` })).toBe(3);
  expect(failures().slice(before)).toEqual([expect.objectContaining({ tenant: t.name, device: without })]);
});

it('MQTT 5: "server unavailable" (0x88), logged as in 3.1.1', async () => {
  const before = failures().length;
  expect(await connackV5({ clientId: 'dev-v5', username: `${t.name}:${withCredential}`, password: secret })).toBe(0x88);
  expect(failures().slice(before)).toEqual([expect.objectContaining({ tenant: t.name, device: withCredential })]);
});
