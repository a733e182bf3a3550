// A credential change the shipped Mosquitto did not confirm (MQTT_DYNAMIC_SECURITY, broker away)
// is answered 503, and the one log line that says why carries the request's id, as every line
// about a request does (docs/operations.md §8, "Request ids"; issue 24). Before, found by an
// audit, the line `the broker did not create the account of a device` had tenant and device but
// no `requestId`: an operator searching the log for the id of a 503 found nothing at the default
// LOG_LEVEL.
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, testEnv, useSpawnedServices, type ReadyService } from '../helpers/service.js';
import { mosquittoInstalled, useRepoMosquitto } from '../deploy/repo-mosquitto.js';
import { eventually } from '../helpers/registry-fixtures.js';
import { deleteCredential, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

describe.skipIf(!mosquittoInstalled())('a credential change the broker did not confirm, in the log', () => {
  const passwords = {
    MQTT_SERVICE_PASSWORD: crypto.randomBytes(12).toString('hex'),
    MQTT_ADMIN_PASSWORD: crypto.randomBytes(12).toString('hex'),
  };
  const broker = useRepoMosquitto(passwords);
  const services = useSpawnedServices();
  let svc: ReadyService;
  let t: Tenant;

  beforeAll(async () => {
    svc = await services.ready(
      await testEnv({
        MQTT_URL: broker().url('device-registry', passwords.MQTT_SERVICE_PASSWORD),
        MQTT_SUBSCRIBER_CONNECTIONS: '1',
        MQTT_DYNAMIC_SECURITY: 'true',
        MQTT_DEVICE_AUTH: 'required',
        LOG_LEVEL: 'info',
        LOG_FORMAT: 'json',
      }),
    );
    t = await newTenant(svc, 'rid');
  }, 90_000);
  afterAll(async () => {
    svc?.svc.child.kill('SIGTERM');
    await svc?.svc.exited;
  });

  /** The service's JSON log lines whose `msg` is `msg`. */
  const lines = (msg: string) =>
    svc.svc.output
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === msg);

  it('POST and DELETE of a credential answered 503 log their request id with the reason', async () => {
    const d = await newDevice(svc, t);
    const kept = await newCredential(svc, t, d);
    await broker().stop();
    try {
      const created = await http('POST', `${svc.base}/device/${d}/credentials`, {
        token: t.token,
        body: { type: 'password' },
        headers: { 'x-request-id': 'audit-create-1' },
      });
      expect(created.status).toBe(503);
      expect(created.headers.get('x-request-id')).toBe('audit-create-1');
      const removed = await http('DELETE', `${svc.base}/device/${d}/credentials/${kept.id}`, {
        token: t.token,
        headers: { 'x-request-id': 'audit-remove-2' },
      });
      expect(removed.status).toBe(503);

      const create = lines('the broker did not create the account of a device');
      expect(create).toHaveLength(1);
      expect(create[0]).toMatchObject({ tenant: t.name, device: d, requestId: 'audit-create-1' });
      const remove = lines('the broker did not remove the account of a device');
      expect(remove).toHaveLength(1);
      expect(remove[0]).toMatchObject({ tenant: t.name, device: d, requestId: 'audit-remove-2' });
      // Neither line holds the secret that was to be sent.
      expect(svc.svc.output.join('\n')).not.toContain(kept.secret);
    } finally {
      await broker().start();
    }
    // With the broker back (the service's connection to it again), the same change goes through.
    await eventually(async () => (await deleteCredential(svc, t, d, kept.id)).status === 200 || undefined, 'the credential deleted');
  }, 90_000);
});
