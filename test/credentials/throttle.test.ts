// Repeated failed logins slow the guesser down (docs/credentials.md): the throttle's rule with a
// clock of its own, then against the embedded broker.
import crypto from 'node:crypto';
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import { beforeAll, describe, expect, it } from 'vitest';
import { LoginThrottle } from '../../src/registry/credentials/throttle.js';
import { useService } from '../helpers/service.js';
import { connackCode, metricValue, newCredential, newDevice, newTenant, type Tenant } from './fixtures.js';

describe('LoginThrottle', () => {
  it('a device name gets 3 free failures, then waits 0.5 s, 1 s, 2 s ... up to 8 s; a success forgives it', () => {
    let now = 0;
    const th = new LoginThrottle(() => now);
    const keys = ['u:t:abc', 'a:10.0.0.1'];
    const delays: number[] = [];
    for (let i = 0; i < 9; i++) {
      delays.push(th.delayFor(keys)!);
      th.failed(keys);
      now += 1000;
    }
    expect(delays).toEqual([0, 0, 0, 500, 1000, 2000, 4000, 8000, 8000]);
    th.succeeded('u:t:abc');
    expect(th.delayFor(['u:t:abc'])).toBe(0);
    // The address is not forgiven by a success; its own allowance is larger (a gateway, a NAT).
    expect(th.delayFor(['a:10.0.0.1'])).toBe(0);
  });

  it('an address gets 30 free failures, shared by every device name it tries', () => {
    const now = 0;
    const th = new LoginThrottle(() => now);
    for (let i = 0; i < 30; i++) th.failed([`u:t:${i}`, 'a:10.0.0.2']);
    expect(th.delayFor(['u:t:fresh', 'a:10.0.0.2'])).toBe(500);
    expect(th.delayFor(['u:t:fresh', 'a:10.0.0.3'])).toBe(0);
  });

  it('failures are forgotten 15 minutes after the last one', () => {
    let now = 0;
    const th = new LoginThrottle(() => now);
    for (let i = 0; i < 5; i++) th.failed(['u:t:x']);
    expect(th.delayFor(['u:t:x'])).toBe(2000);
    now += 15 * 60_000 + 1;
    expect(th.delayFor(['u:t:x'])).toBe(0);
  });

  it('past 16 attempts waiting for one key, further ones are refused unchecked', async () => {
    const th = new LoginThrottle();
    for (let i = 0; i < 3; i++) th.failed(['u:t:y']);
    const waits = Array.from({ length: 16 }, () => th.wait(['u:t:y'], th.delayFor(['u:t:y'])!));
    expect(th.delayFor(['u:t:y'])).toBeUndefined();
    await Promise.all(waits);
    expect(th.delayFor(['u:t:y'])).toBe(500);
  });

  it('a device name flooded from one address still lets an attempt from an address that never failed wait its turn', async () => {
    const th = new LoginThrottle();
    const guesser = ['u:t:z', 'a:10.9.9.9'];
    for (let i = 0; i < 3; i++) th.failed(guesser);
    const waits = Array.from({ length: 16 }, () => th.wait(guesser, th.delayFor(guesser)!));
    expect(th.delayFor(guesser)).toBeUndefined(); // the guesser's 17th: refused unchecked
    expect(th.delayFor(['u:t:z', 'a:10.1.1.1'])).toBe(500); // the device elsewhere: checked after the name's wait
    th.failed(['u:t:z', 'a:10.1.1.1']);
    expect(th.delayFor(['u:t:z', 'a:10.1.1.1'])).toBeUndefined(); // once that address failed, it is capped too
    await Promise.all(waits);
  });

  it('attempts under way for a device name count as its failures until they end: a parallel burst gets 3 checked at once, then waits, then is refused', async () => {
    const th = new LoginThrottle();
    const guesser = ['u:t:w', 'a:10.8.8.8'];
    const delays: Array<number | undefined> = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 22; i++) {
      const delay = th.delayFor(guesser);
      delays.push(delay);
      if (delay === undefined) continue;
      th.begin(guesser);
      if (delay > 0) waits.push(th.wait(guesser, delay).finally(() => th.end(guesser)));
    }
    expect(delays.slice(0, 8)).toEqual([0, 0, 0, 500, 1000, 2000, 4000, 8000]);
    expect(delays.filter((d) => d === undefined)).toHaveLength(22 - 3 - 16);
    // The device itself, from an address with nothing under way, still waits its turn.
    expect(th.delayFor(['u:t:w', 'a:10.1.2.3'])).toBe(8000);
    // An address's own attempts under way are not failures (a NAT's devices log in at once).
    th.begin(['u:t:other', 'a:10.8.8.8']);
    expect(th.delayFor(['u:t:another', 'a:10.8.8.8'])).toBe(0);
    for (let i = 0; i < 3; i++) th.end(guesser);
    await Promise.all(waits);
    th.end(['u:t:other', 'a:10.8.8.8']);
    expect(th.delayFor(guesser)).toBe(0);
  }, 20_000);
});

// Every test client comes from 127.0.0.1: each service below serves tests that leave that
// address's failures below its allowance, but for the last one.
function embedded() {
  // `t` is set in beforeAll, before any test reads it (hence the cast of its placeholder).
  const ctx = { svc: useService({ MQTT_URL: undefined, MQTT_DEVICE_AUTH: 'required' }), t: undefined as unknown as Tenant, url: '' };
  beforeAll(async () => {
    ctx.url = `mqtt://127.0.0.1:${ctx.svc.service.mqttPort}`;
    ctx.t = await newTenant(ctx.svc);
  });
  const timed = async (opts: object) => {
    const started = Date.now();
    const code = await connackCode(ctx.url, opts);
    return { code, ms: Date.now() - started };
  };
  return { ctx, timed };
}

describe('against the embedded broker (MQTT_DEVICE_AUTH=required): per device', () => {
  const { ctx, timed } = embedded();

  it('after 3 wrong passwords for a device, its next login waits before it is checked, even with the right password', async () => {
    const { svc, t, url } = ctx;
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const username = `${t.name}:${d}`;
    for (let i = 0; i < 3; i++) expect(await connackCode(url, { username, password: `guess-number-${i}` })).toBe(4);
    const slowed = await timed({ username, password: cred.secret });
    expect(slowed.code).toBe(0);
    expect(slowed.ms).toBeGreaterThanOrEqual(450);
    // The success forgave the device name.
    expect((await timed({ username, password: cred.secret })).code).toBe(0);
  });

  it('a flood of guesses for one device: past 16 waiting, the rest are refused unchecked (throttled)', async () => {
    const { svc, t, url } = ctx;
    const d = await newDevice(svc, t);
    await newCredential(svc, t, d);
    const username = `${t.name}:${d}`;
    for (let i = 0; i < 6; i++) expect(await connackCode(url, { username, password: `guess-number-${i}` })).toBe(4);
    const before = await metricValue(svc, 'device_logins_refused_total{reason="throttled"}');
    const codes = await Promise.all(Array.from({ length: 40 }, (_, i) => connackCode(url, { username, password: `flood-${i}` })));
    expect(new Set(codes)).toEqual(new Set([4]));
    expect(await metricValue(svc, 'device_logins_refused_total{reason="throttled"}')).toBeGreaterThan(before);
  });
});

describe('against the embedded broker (MQTT_DEVICE_AUTH=required): per address', () => {
  const { ctx, timed } = embedded();

  it('after 30 failures from one address, that address waits, whatever device it names', async () => {
    const { svc, t, url } = ctx;
    const d = await newDevice(svc, t);
    const cred = await newCredential(svc, t, d);
    const fresh = await timed({ username: `${t.name}:${d}`, password: cred.secret });
    expect(fresh.code).toBe(0);
    for (let i = 0; i < 30; i++) expect(await connackCode(url, { username: `${t.name}:nodev${i}` })).toBe(4);
    const slowed = await timed({ username: `${t.name}:${d}`, password: cred.secret });
    expect(slowed.code).toBe(0);
    expect(slowed.ms).toBeGreaterThanOrEqual(450);
  });
});

/** A raw MQTT 3.1.1 login from `localAddress` (another loopback address is another client address); resolves its CONNACK code. */
function connackFrom(localAddress: string, port: number, username: string, password: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress }, () => {
      s.write(
        mqttPacket.generate({
          cmd: 'connect',
          protocolId: 'MQTT',
          protocolVersion: 4,
          clientId: `raw-${crypto.randomBytes(4).toString('hex')}`,
          clean: true,
          keepalive: 60,
          username,
          password: Buffer.from(password),
        }),
      );
    });
    const parser = mqttPacket.parser({ protocolVersion: 4 });
    parser.on('packet', (p) => {
      if (p.cmd === 'connack') {
        resolve(p.returnCode ?? -1);
        s.destroy();
      }
    });
    s.on('data', (d) => parser.parse(d));
    s.on('error', reject);
    s.on('close', () => resolve(-1));
  });
}

describe('against the embedded broker (MQTT_DEVICE_AUTH=required): guesses sent in parallel', () => {
  const { ctx } = embedded();
  const port = () => Number(new URL(ctx.url).port);

  it('a burst of parallel guesses for one device: 3 are checked at once, the next wait, past 16 waiting the rest are refused unchecked', async () => {
    const { svc, t } = ctx;
    const d = await newDevice(svc, t);
    await newCredential(svc, t, d, { type: 'password', secret: 'the-chosen-secret-of-d' });
    const before = await metricValue(svc, 'device_logins_refused_total{reason="throttled"}');
    // Each guess differs (identical ones share one check), each costs a slow hash when checked.
    const codes = await Promise.all(
      Array.from({ length: 200 }, (_, i) => connackFrom('127.0.0.1', port(), `${t.name}:${d}`, `guess-${i}-of-the-chosen`)),
    );
    expect(new Set(codes)).toEqual(new Set([4]));
    // Before attempts under way counted, all 200 were checked (0 throttled): a slow hash each.
    // About 3 + 16 are checked (a few more when waits end while the burst still arrives).
    expect((await metricValue(svc, 'device_logins_refused_total{reason="throttled"}')) - before).toBeGreaterThanOrEqual(150);
  });

  it('a flood of slow checks from one address does not hold up a login from another: slow hashes are served address by address', async () => {
    const { svc, t } = ctx;
    const targets = [];
    for (let i = 0; i < 40; i++) {
      const d = await newDevice(svc, t);
      await newCredential(svc, t, d, { type: 'password', secret: `chosen-secret-number-${i}` });
      targets.push(d);
    }
    const victim = await newDevice(svc, t);
    await newCredential(svc, t, victim, { type: 'password', secret: 'the-victims-own-secret' });
    // Two guesses per device from 127.0.0.3 (under every free allowance: each is checked).
    let answered = 0;
    const flood = targets.flatMap((d) =>
      [0, 1].map((g) => connackFrom('127.0.0.3', port(), `${t.name}:${d}`, `guess-${g}-for-${d}`).finally(() => answered++)),
    );
    await new Promise((r) => setTimeout(r, 100));
    const started = Date.now();
    expect(await connackFrom('127.0.0.4', port(), `${t.name}:${victim}`, 'the-victims-own-secret')).toBe(0);
    const answeredThen = answered;
    const victimMs = Date.now() - started;
    await Promise.all(flood);
    console.log(`victim logged in after ${victimMs} ms, ${answeredThen} of the flood's ${flood.length} guesses answered by then`);
    // First come, first served, the victim would wait for all 80.
    expect(answeredThen).toBeLessThan(flood.length / 2);
  });
});
