// The compose stack's broker without docker: this machine's Mosquitto 2 started through
// deploy/mosquitto/entrypoint.sh with deploy/mosquitto/mosquitto.conf, changed only where the
// container's paths and port differ (listener, password file, plugin path, dynamic-security
// file, persistence directory); the ACL file is the repository's own.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { freePort } from '../../src/net.js';
import { tempDir } from '../helpers/service.js';
import { commandExists, dynsecPlugin, readRepoFile, repoFile } from './files.js';

/** Mosquitto, mosquitto_passwd, mosquitto_ctrl and the dynamic-security plugin are installed. */
export const mosquittoInstalled = (): boolean =>
  commandExists('mosquitto') && commandExists('mosquitto_passwd') && commandExists('mosquitto_ctrl') && dynsecPlugin() !== undefined;

export interface BrokerPasswords {
  MQTT_SERVICE_PASSWORD: string;
  MQTT_ADMIN_PASSWORD: string;
}

/**
 * The file's broker, started in beforeAll and disposed of in afterAll: called before the file's
 * useService(), it starts before the service and stops after it (afterAll hooks run last first).
 */
export function useRepoMosquitto(passwords: BrokerPasswords): () => RepoMosquitto {
  let broker: RepoMosquitto | undefined;
  beforeAll(async () => {
    broker = await RepoMosquitto.create(passwords);
    await broker.start();
  });
  afterAll(() => broker?.dispose());
  return () => {
    if (!broker) throw new Error('the broker starts in beforeAll');
    return broker;
  };
}

export class RepoMosquitto {
  private child: ChildProcess | undefined;
  output = '';

  private constructor(
    readonly dir: string,
    readonly port: number,
    readonly configFile: string,
    public passwords: BrokerPasswords,
  ) {}

  static async create(passwords: BrokerPasswords): Promise<RepoMosquitto> {
    const dir = await tempDir('dr-mosquitto-');
    const broker = new RepoMosquitto(dir, await freePort(), path.join(dir, 'mosquitto.conf'), passwords);
    await broker.writeConfig();
    return broker;
  }

  /** The options that differ between the container and this machine; every one must exist in the repository file. */
  replacedOptions(): Record<string, string> {
    return {
      listener: `${this.port} 127.0.0.1`,
      password_file: path.join(this.dir, 'auth', 'passwd'),
      acl_file: repoFile('deploy/mosquitto/acl'),
      plugin: dynsecPlugin()!,
      plugin_opt_config_file: path.join(this.dir, 'data', 'dynamic-security.json'),
      persistence_location: path.join(this.dir, 'data') + '/',
    };
  }

  private async writeConfig(): Promise<void> {
    const replaced = this.replacedOptions();
    const seen = new Set<string>();
    const text = readRepoFile('deploy/mosquitto/mosquitto.conf')
      .split('\n')
      .map((line) => {
        const name = line.trim().split(/\s+/)[0]!;
        if (line.trim().startsWith('#') || !(name in replaced)) return line;
        seen.add(name);
        return `${name} ${replaced[name]}`;
      })
      .join('\n');
    const missing = Object.keys(replaced).filter((k) => !seen.has(k));
    if (missing.length > 0) throw new Error(`deploy/mosquitto/mosquitto.conf has no ${missing.join(', ')}`);
    await fs.writeFile(this.configFile, text);
  }

  url(username: string, password: string): string {
    return `mqtt://${encodeURIComponent(username)}:${encodeURIComponent(password)}@127.0.0.1:${this.port}`;
  }

  /** Runs the entrypoint (which execs mosquitto) and waits for "running". */
  async start(): Promise<void> {
    this.output = '';
    const child = spawn('sh', [repoFile('deploy/mosquitto/entrypoint.sh'), this.configFile], {
      env: { PATH: process.env.PATH, ...this.passwords },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    child.stdout.on('data', (c: Buffer) => (this.output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (this.output += c.toString()));
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`mosquitto exited with ${child.exitCode}:\n${this.output}`);
      if (/mosquitto version [\d.]+ running/.test(this.output)) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`mosquitto did not start:\n${this.output}`);
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }

  /** Stops the broker and deletes its directory. */
  async dispose(): Promise<void> {
    await this.stop();
    await fs.rm(this.dir, { recursive: true, force: true });
  }

  /** What operators run (docs/operations.md, "Device accounts"). */
  addDevice(username: string, password: string): void {
    execFileSync(
      'mosquitto_ctrl',
      [
        '-h',
        '127.0.0.1',
        '-p',
        String(this.port),
        '-u',
        'broker-admin',
        '-P',
        this.passwords.MQTT_ADMIN_PASSWORD,
        'dynsec',
        'createClient',
        username,
        '-p',
        password,
      ],
      { stdio: 'pipe' },
    );
  }
}
