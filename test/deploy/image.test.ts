// The Dockerfile, checked without a docker engine: its stages as written, and the runtime
// stage's file layout rebuilt in a temporary directory and started with the image's CMD,
// judged by the image's own HEALTHCHECK command.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/net.js';
import { projectRoot } from '../../src/paths.js';
import { loggedAddress, tempDir, testEnv } from '../helpers/service.js';
import { dockerfileStages, readRepoFile } from './files.js';

const dockerfile = readRepoFile('Dockerfile');
const { args, stages } = dockerfileStages(dockerfile);
const runtime = stages[stages.length - 1]!;
const instr = (stage: { instructions: string[] }, word: string) => stage.instructions.filter((i) => i.toUpperCase().startsWith(word + ' '));
const stageOf = (name: string) => stages.find((s) => s.name === name)!;
/** A stage and the stages it is built FROM. */
const lineage = (name: string): string[][] => {
  const s = stageOf(name);
  return s ? [s.instructions, ...lineage(s.from)] : [];
};

/** The exec form of an instruction: CMD ["a","b"] → ['a','b']. */
function execForm(instruction: string): string[] {
  return JSON.parse(instruction.slice(instruction.indexOf('['))) as string[];
}

describe('Dockerfile', () => {
  it('is multi-stage: builds with every dependency, ships only production ones', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const build = lineage('build').flat();
    expect(build.some((i) => /^RUN npm ci\b(?!.*--omit=dev)/.test(i))).toBe(true);
    expect(build.some((i) => /^RUN npm run build\b/.test(i))).toBe(true);

    const copies = instr(runtime, 'COPY');
    const modules = copies.find((c) => / \/app\/node_modules /.test(c))!;
    expect(modules).toBeDefined();
    const from = /--from=(\S+)/.exec(modules)![1]!;
    expect(
      lineage(from)
        .flat()
        .some((i) => /^RUN npm ci\b.*--omit=dev/.test(i)),
    ).toBe(true);
    // The runtime stage installs nothing itself.
    expect(instr(runtime, 'RUN').some((i) => /npm (ci|install)/.test(i))).toBe(false);
    expect(copies.some((c) => /--from=build \/app\/dist \.\/dist$/.test(c))).toBe(true);
    expect(copies.some((c) => / sql \.\/sql$/.test(c))).toBe(true);
  });

  it('runs on a glibc Debian Node 20 image as a non-root user', () => {
    expect(runtime.from).toMatch(/^node:20-(bookworm|bullseye|trixie)(-slim)?$/);
    expect(args.RUNTIME_IMAGE).toBe(runtime.from);
    const user = instr(runtime, 'USER').at(-1)?.split(/\s+/)[1];
    expect(user).toBeDefined();
    expect(['root', '0']).not.toContain(user!.split(':')[0]);
  });

  it('checks /health with node (no curl in the slim image), runs dist/src/main.js, exposes 8000 and 8001', () => {
    const health = instr(runtime, 'HEALTHCHECK');
    expect(health).toHaveLength(1);
    const cmd = execForm(health[0]!.slice(health[0]!.indexOf(' CMD ')));
    expect(cmd[0]).toBe('node');
    expect(cmd.join(' ')).toContain('/health');
    expect(execForm(instr(runtime, 'CMD')[0]!)).toEqual(['node', 'dist/src/main.js']);
    const exposed = instr(runtime, 'EXPOSE').flatMap((e) => e.split(/\s+/).slice(1));
    expect(exposed).toEqual(expect.arrayContaining(['8000', '8001']));
    // Without INTERNAL_HOST=0.0.0.0 no other container could reach the internal API.
    expect(instr(runtime, 'ENV').join(' ')).toMatch(/INTERNAL_HOST=0\.0\.0\.0/);
  });

  it('.dockerignore keeps secrets and local artefacts out but nothing the build copies', async () => {
    const ignored = readRepoFile('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['.env', '.git', 'node_modules', 'dist', 'data']));
    const sources = stages
      .flatMap((s) => instr(s, 'COPY'))
      .filter((c) => !c.includes('--from='))
      .flatMap((c) =>
        c
          .split(/\s+/)
          .slice(1, -1)
          .filter((p) => !p.startsWith('--')),
      );
    expect(sources).toEqual(expect.arrayContaining(['package.json', 'src', 'sql']));
    for (const src of sources) {
      await fs.access(path.join(projectRoot, src));
      expect(ignored, `${src} is copied but ignored`).not.toContain(src);
    }
  });
});

describe('the runtime stage layout', () => {
  const children: ChildProcess[] = [];
  let productionModules: string;

  // The `deps` stage, outside docker: package.json and the lock file, then its `npm ci` command
  // (from the npm cache when it has everything, as after CI's own `npm ci`).
  beforeAll(async () => {
    const depsStage = stages.find((s) =>
      lineage(s.name)
        .flat()
        .some((i) => /^RUN npm ci\b.*--omit=dev/.test(i)),
    )!;
    const command = lineage(depsStage.name)
      .flat()
      .filter((i) => i.startsWith('RUN '))
      .flatMap((i) =>
        i
          .slice(4)
          .split('&&')
          .map((c) => c.trim()),
      )
      .find((c) => /^npm ci\b.*--omit=dev/.test(c))!;
    const dir = await tempDir('dr-image-deps-');
    dirs.push(dir);
    for (const f of ['package.json', 'package-lock.json']) await fs.copyFile(path.join(projectRoot, f), path.join(dir, f));
    const args = command.split(/\s+/).slice(1);
    const npm = (extra: string[]) => spawnSync('npm', [...args, ...extra], { cwd: dir, encoding: 'utf8', timeout: 300_000 });
    let res = npm(['--offline']);
    if (res.status !== 0) res = npm([]);
    expect(res.status, res.stderr).toBe(0);
    productionModules = path.join(dir, 'node_modules');
  });

  const dirs: string[] = [];

  // SIGTERM, not SIGKILL: the zero-setup start has an embedded PostgreSQL that the service stops.
  afterAll(async () => {
    await Promise.all(
      children.map(async (c) => {
        if (c.exitCode !== null || c.signalCode !== null) return;
        const exited = new Promise((r) => c.once('exit', r));
        c.kill('SIGTERM');
        const timer = setTimeout(() => c.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(timer);
      }),
    );
    // The production node_modules is some 200 MB.
    await Promise.all(dirs.map((d) => fs.rm(d, { recursive: true, force: true })));
  });

  /** Rebuilds /app as the runtime stage's COPY lines lay it out; node_modules is the `deps` stage's. */
  async function layout(): Promise<string> {
    const app = await tempDir('dr-image-');
    dirs.push(app);
    for (const copy of instr(runtime, 'COPY')) {
      const parts = copy
        .split(/\s+/)
        .slice(1)
        .filter((p) => !p.startsWith('--'));
      const dest = parts.pop()!;
      for (const src of parts) {
        const from = src.startsWith('/app/') ? path.join(projectRoot, src.slice('/app/'.length)) : path.join(projectRoot, src);
        const to = dest.endsWith('/') ? path.join(app, dest, path.basename(src)) : path.join(app, dest);
        if (path.basename(src) === 'node_modules') await fs.symlink(productionModules, to);
        else await fs.cp(from, to, { recursive: true });
      }
    }
    return app;
  }

  /** Starts the image's CMD in `app`; resolves with the public API address. */
  async function startCmd(app: string, env: Record<string, string | undefined>): Promise<string> {
    const [cmd, ...cmdArgs] = execForm(instr(runtime, 'CMD')[0]!);
    const child = spawn(cmd === 'node' ? process.execPath : cmd!, cmdArgs, {
      cwd: app,
      env: { PATH: process.env.PATH, ...env, LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let output = '';
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no "public HTTP API listening" line; output:\n${output}`)), 90_000);
      const onData = (chunk: Buffer) => {
        output += chunk.toString('utf8');
        const line = output.split('\n').find((l) => l.includes('public HTTP API listening'));
        if (line) {
          clearTimeout(timer);
          resolve(loggedAddress(line));
        }
      };
      child.stdout.on('data', onData);
      child.stderr.on('data', onData);
      child.once('exit', (code) => reject(new Error(`exited with ${code}; output:\n${output}`)));
    });
  }

  function healthcheck(port: number): number | null {
    const health = instr(runtime, 'HEALTHCHECK')[0]!;
    const [cmd, ...rest] = execForm(health.slice(health.indexOf(' CMD ')));
    const res = spawnSync(cmd === 'node' ? process.execPath : cmd!, rest, {
      env: { PATH: process.env.PATH, PORT: String(port) },
      timeout: 20_000,
    });
    return res.status;
  }

  it('starts with the image CMD and production dependencies only, against an external database; HEALTHCHECK says healthy', async () => {
    const app = await layout();
    for (const dir of ['src', 'test', 'scripts', 'tsconfig.json']) {
      await expect(fs.access(path.join(app, dir))).rejects.toThrow();
    }
    await expect(fs.access(path.join(productionModules, 'vitest'))).rejects.toThrow();
    const address = await startCmd(app, await testEnv());
    expect(healthcheck(Number(new URL(address).port))).toBe(0);
  });

  it('starts with the zero-setup defaults too (embedded PostgreSQL from the production install)', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const address = await startCmd(await layout(), { DATA_DIR: dataDir, PORT: '0', INTERNAL_PORT: '0', MQTT_PORT: '0', HOST: '127.0.0.1' });
    expect(healthcheck(Number(new URL(address).port))).toBe(0);
  });

  it('the HEALTHCHECK command says unhealthy when nothing answers', async () => {
    expect(healthcheck(await freePort())).toBe(1);
  });
});
