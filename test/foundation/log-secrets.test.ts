// Logs never carry secrets: at debug level, passwords, tokens, keys and generated pre-shared keys
// stay out of the output of a real process (the embedded PostgreSQL's lines included).
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import type { DevicesCreated, DeviceView, KeyRecord, TemplateCreated, TemplateList } from '../helpers/api.js';
import { parseLogLines } from '../helpers/log-lines.js';
import { http, login, terminate, useSpawnedServices, zeroSetupEnv } from '../helpers/service.js';

const spawned = useSpawnedServices();

describe('logs never contain secrets', () => {
  it('at LOG_LEVEL=debug, with the embedded database: no password, token, key or generated psk in the output', async () => {
    const secret = (what: string) => `${what}-${crypto.randomBytes(12).toString('hex')}`;
    const adminPassword = secret('admin-pw');
    const userPassword = secret('user-pw');
    const wrongPassword = secret('wrong-pw');
    const unknownUserPassword = secret('nobody-pw');
    const rejectedPassword = secret('rejected-pw');
    const jwtSecret = secret('jwt-secret');
    const pskEncryptionKey = crypto.randomBytes(32).toString('hex');
    const env = await zeroSetupEnv({
      LOG_LEVEL: 'debug',
      ADMIN_PASSWORD: adminPassword,
      JWT_SECRET: jwtSecret,
      PSK_ENCRYPTION_KEY: pskEncryptionKey,
    });
    const { svc, base, internal } = await spawned.ready(env, 90_000);

    const adminToken = await login(base, 'admin', adminPassword);
    const created = await http('POST', `${base}/auth/user`, {
      token: adminToken,
      body: { username: 'robust-user', passwd: userPassword, service: 'robust', profile: 'user' },
    });
    expect(created.status, created.text).toBe(201);
    const userToken = await login(base, 'robust-user', userPassword);
    // Failing requests that carry secrets.
    expect((await http('POST', `${base}/auth`, { body: { username: 'admin', passwd: wrongPassword } })).status).toBe(403);
    expect((await http('POST', `${base}/auth`, { body: { username: 'nobody', passwd: unknownUserPassword } })).status).toBe(401);
    const invalidBody = await http('POST', `${base}/auth/user`, {
      token: adminToken,
      body: { username: 'x y', passwd: rejectedPassword, service: 'robust', profile: 'user' },
    });
    expect(invalidBody.status).toBe(400);
    const tampered = `${userToken.slice(0, -4)}${userToken.endsWith('AAAA') ? 'BBBB' : 'AAAA'}`;
    const foreign = await new SignJWT({ service: 'robust', username: 'robust-user', userid: 2, profile: 'user' })
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuer('device-registry')
      .setIssuedAt()
      .setExpirationTime('1h')
      .setJti(crypto.randomUUID())
      .sign(new TextEncoder().encode(secret('foreign-key')));
    for (const bad of [tampered, foreign]) expect((await http<TemplateList>('GET', `${base}/template`, { token: bad })).status).toBe(401);

    // The user's token for several requests, among them the generation and copy of pre-shared keys.
    const template = await http<TemplateCreated>('POST', `${base}/template`, {
      token: userToken,
      body: {
        label: 'keyed',
        attrs: [
          { label: 'key', type: 'static', value_type: 'psk' },
          { label: 'temperature', type: 'dynamic', value_type: 'float' },
        ],
      },
    });
    expect(template.status, template.text).toBe(200);
    const devices = await http<DevicesCreated>('POST', `${base}/device?count=2`, {
      token: userToken,
      body: { label: 'keyed', templates: [template.body.template.id] },
    });
    expect(devices.status, devices.text).toBe(200);
    const [first, second] = devices.body.devices.map((d) => d.id) as [string, string];
    const generated = await http<KeyRecord[]>('POST', `${base}/device/gen_psk/${first}?key_length=16`, { token: userToken });
    expect(generated.status, generated.text).toBe(200);
    const psk = generated.body[0]!.psk;
    expect(psk).toMatch(/^[0-9a-f]{32}$/);
    const copied = await http('PUT', `${base}/device/${second}/attrs/key/psk?from_dev_id=${first}&from_attr_label=key`, {
      token: userToken,
    });
    expect(copied.status, copied.text).toBe(204);
    const internalView = await http<DeviceView>('GET', `${internal}/internal/device/${second}`, { token: userToken });
    expect(internalView.status, internalView.text).toBe(200);
    expect(internalView.text).toContain(psk);
    expect((await http<DeviceView>('GET', `${base}/device/${first}`, { token: userToken })).status).toBe(200);
    expect((await http('GET', `${base}/no/such/route`, { token: userToken })).status).toBe(404);

    const { code } = await terminate(svc);
    expect(code).toBe(0);
    const pgPassword = (await fs.readFile(path.join(env.DATA_DIR!, 'pg-password'), 'utf8')).trim();

    const output = svc.output.join('\n');
    // The capture is real: debug lines (the embedded PostgreSQL's own output among them) are there.
    expect(svc.output.some((l) => l.includes('"level":"debug"'))).toBe(true);
    expect(output).toContain('"msg":"stopped"');
    const secrets: Record<string, string> = {
      adminPassword,
      userPassword,
      wrongPassword,
      unknownUserPassword,
      rejectedPassword,
      jwtSecret,
      pskEncryptionKey,
      pgPassword,
      psk,
      // Each token whole, and its signature alone (the part that makes it usable).
      adminToken,
      userToken,
      tampered,
      foreign,
      adminTokenSignature: adminToken.split('.')[2]!,
      userTokenSignature: userToken.split('.')[2]!,
    };
    for (const [name, value] of Object.entries(secrets)) {
      expect(value.length, name).toBeGreaterThanOrEqual(16);
      expect(output.includes(value), `${name} appears in the log output`).toBe(false);
    }
    // The psk in any case, and the key given in PSK_ENCRYPTION_KEY as base64 too.
    expect(output.toLowerCase()).not.toContain(psk);
    expect(output).not.toContain(Buffer.from(psk, 'hex').toString('base64'));
    expect(output).not.toContain(Buffer.from(pskEncryptionKey, 'hex').toString('base64'));
    // At debug too, every line (the embedded PostgreSQL's output included) is one JSON object.
    parseLogLines(svc.output);
  }, 120_000);
});
