// Connections of an instance that missed registry events (docs/credentials.md §3). Two instances
// on one database; the second runs its own embedded broker and reaches the database through a
// proxy that keeps its registry LISTEN connection away for a while. A credential deleted and a
// device removed through the first instance meanwhile were never heard by the second: before,
// the connections that logged in there with them stayed open until they ended. Now the second,
// listening again, checks its connected devices against the registry and closes those whose
// login no longer holds; the others stay.
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LISTEN_APPLICATION_NAME } from '../../src/registry/events.js';
import { listenBlockingProxy, type ListenBlockingProxy } from '../helpers/faults.js';
import { closedByPeer } from '../helpers/registry-fixtures.js';
import { http, loggedAddress, tempDir, useService, useSpawnedServices, type ReadyService } from '../helpers/service.js';
import { connackCode, connect, deleteCredential, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

const JWT_SECRET = crypto.randomBytes(24).toString('hex');

describe('an instance that missed registry events while it could not listen', () => {
  const a = useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required', JWT_SECRET });
  const spawned = useSpawnedServices();
  let proxy: ListenBlockingProxy;
  let b: ReadyService;
  let mqttUrl: string;
  let t: Tenant;

  beforeAll(async () => {
    proxy = await listenBlockingProxy(a.env.DATABASE_URL!, LISTEN_APPLICATION_NAME);
    b = await spawned.ready({
      ...a.env,
      DATABASE_URL: proxy.url,
      DATA_DIR: await tempDir(),
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
    });
    mqttUrl = loggedAddress(await b.svc.waitFor(/embedded MQTT broker listening/));
    t = await newTenant(a);
  });
  afterAll(() => proxy?.close());

  const as = (device: string) => `${t.name}:${device}`;

  it('closes, once listening again, the connections whose credential was deleted or device removed meanwhile; the others stay', async () => {
    const [revoked, removed, kept] = [await newDevice(a, t), await newDevice(a, t), await newDevice(a, t)];
    const removedClientId = `persistent-${crypto.randomBytes(4).toString('hex')}`;
    const credentials = {
      revoked: await newCredential(a, t, revoked),
      removed: await newCredential(a, t, removed),
      kept: await newCredential(a, t, kept),
    };
    const clients = {
      revoked: await connect(mqttUrl, { username: as(revoked), password: credentials.revoked.secret }),
      // A persistent session under a client id that does not name the device: that id is the
      // removed device's until it is forgotten as by its removal.
      removed: await connect(mqttUrl, {
        username: as(removed),
        password: credentials.removed.secret,
        clean: false,
        clientId: removedClientId,
      }),
      kept: await connect(mqttUrl, { username: as(kept), password: credentials.kept.secret }),
    };
    const closed = { revoked: closedByPeer(clients.revoked, 20_000), removed: closedByPeer(clients.removed, 20_000) };
    // Held by the device: another device is refused it ("identifier rejected").
    expect(await connackCode(mqttUrl, { username: as(kept), password: credentials.kept.secret, clientId: removedClientId })).toBe(2);

    const lost = b.svc.output.length;
    proxy.block();
    await b.svc.waitFor(/lost the registry change notifications/);
    // The loss itself makes the second instance check its connections (nothing changed yet):
    // the changes below come after that check, and are missed.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await deleteCredential(a, t, revoked, credentials.revoked.id)).status).toBe(200);
    expect((await http('DELETE', `${a.base}/device/${removed}`, { token: t.token })).status).toBe(200);
    // Not heard: both connections are still open while the second instance cannot listen.
    await new Promise((r) => setTimeout(r, 1500));
    expect({ revoked: clients.revoked.connected, removed: clients.removed.connected }).toEqual({ revoked: true, removed: true });

    proxy.unblock();
    await closed.revoked;
    await closed.removed;
    expect(b.svc.output.slice(lost).some((l) => l.includes('listening to registry change notifications again'))).toBe(true);
    const closings = b.svc.output.slice(lost).filter((l) => l.includes('closing an MQTT connection'));
    expect(closings.map((l) => (JSON.parse(l) as { device: string }).device).sort()).toEqual([removed, revoked].sort());
    expect(closings.find((l) => l.includes(removed))).toContain('its device was removed');
    // The removed device's client id is free again, for another device.
    expect(await connackCode(mqttUrl, { username: as(kept), password: credentials.kept.secret, clientId: removedClientId })).toBe(0);
    // Nothing secret in what was logged.
    for (const c of Object.values(credentials)) expect(b.svc.output.join('\n')).not.toContain(c.secret);
    // The device whose login still holds stays connected and publishes.
    await new Promise((r) => setTimeout(r, 500));
    expect(clients.kept.connected).toBe(true);
    await clients.kept.publishAsync(`${as(kept)}/attrs`, JSON.stringify({ temperature: 20 }), { qos: 1 });
    for (const c of Object.values(clients)) c.end(true);
  }, 60_000);
});
