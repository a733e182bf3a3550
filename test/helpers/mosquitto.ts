// A Mosquitto process of the test's own (a config file from the repo, a free port), for tests
// that need Mosquitto's behaviour and a configuration CI can reproduce.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import net from 'node:net';
import { freePort } from '../../src/net.js';
import { tempDir } from './service.js';

export function mosquittoBinary(): string | undefined {
  for (const candidate of ['/usr/sbin/mosquitto', '/usr/local/sbin/mosquitto', '/usr/bin/mosquitto']) {
    try {
      execFileSync(candidate, ['-h'], { stdio: 'ignore' });
      return candidate;
    } catch (err) {
      // `mosquitto -h` exits with 3 after printing its help: the binary is there.
      if (typeof (err as { status?: unknown }).status === 'number') return candidate;
    }
  }
  return undefined;
}

export interface Mosquitto {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** Starts Mosquitto with `configFile` on `port` (default: a free one; give the old one's to restart it). */
export async function startMosquitto(configFile: string, port?: number): Promise<Mosquitto> {
  const bin = mosquittoBinary();
  if (!bin) throw new Error('mosquitto is not installed');
  port ??= await freePort();
  const dir = await tempDir('dr-mosquitto-');
  const conf = path.join(dir, 'mosquitto.conf');
  await fs.writeFile(conf, (await fs.readFile(configFile, 'utf8')) + `\nlistener ${port} 127.0.0.1\n`);
  const child = spawn(bin, ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const deadline = Date.now() + 10_000;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (up) break;
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`mosquitto did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `mqtt://127.0.0.1:${port}`,
    port,
    process: child,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }).then(() => fs.rm(dir, { recursive: true, force: true })),
  };
}
