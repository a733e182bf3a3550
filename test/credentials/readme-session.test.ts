// The README's first session, run as written (its shell block, by sh) against the service as a
// fresh clone starts it: no configuration but the ports (the embedded PostgreSQL in a new
// DATA_DIR, the embedded broker; this machine's own Mosquitto holds 1883). It creates a
// credential and publishes with it; the value must come back from history.
import { execFileSync, spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRepoFile } from '../deploy/files.js';
import { loggedAddress, tempDir, useSpawnedServices, type SpawnedService } from '../helpers/service.js';

const readme = readRepoFile('README.md');
const section = readme.slice(readme.indexOf('## A first session'), readme.indexOf('\n## ', readme.indexOf('## A first session') + 1));
const script = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!).join('\n');
const hasTools = ['curl', 'mosquitto_pub'].every((c) => spawnSync('sh', ['-c', `command -v ${c}`]).status === 0);

describe.skipIf(!hasTools)('README: a first session', () => {
  let proc: SpawnedService;
  let http: URL;
  let mqtt: URL;

  const spawned = useSpawnedServices();
  beforeAll(async () => {
    const started = await spawned.ready(
      { DATA_DIR: await tempDir(), PORT: '0', INTERNAL_PORT: '0', MQTT_PORT: '0', LOG_LEVEL: 'info' },
      120_000,
    );
    proc = started.svc;
    http = new URL(started.base);
    mqtt = new URL(loggedAddress(await proc.waitFor(/embedded MQTT broker listening/)));
  });
  // SIGTERM, so that the embedded PostgreSQL stops too (useSpawnedServices only kills what is left).
  afterAll(async () => {
    proc?.child.kill('SIGTERM');
    await proc?.exited;
  });

  it('creates a credential and publishes with it; the value is stored', () => {
    expect(script).toContain('/credentials');
    expect(script).toContain('-P "$SECRET"');
    const local = script
      .replaceAll('localhost:8000', `127.0.0.1:${http.port}`)
      .replaceAll('mosquitto_pub -h localhost', `mosquitto_pub -h 127.0.0.1 -p ${mqtt.port}`);
    const out = execFileSync('sh', ['-c', local], { encoding: 'utf8', timeout: 60_000 });
    expect(out).toMatch(/\[\{"device_id":"4f2a1c","ts":"[^"]+","value":21\.5,"attr":"temperature"\}\]\s*$/);
    // Without the secret the device is refused now.
    const refused = spawnSync(
      'mosquitto_pub',
      ['-h', '127.0.0.1', '-p', mqtt.port, '-q', '1', '-u', 'admin:4f2a1c', '-t', 'admin:4f2a1c/attrs', '-m', '{}'],
      { encoding: 'utf8' },
    );
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/bad user name or password/i);
  });
});
