// The Dockerfile, checked without a docker engine: its stages as written, and the runtime
// stage's file layout rebuilt in a temporary directory and started with the image's CMD,
// judged by the image's own HEALTHCHECK command.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
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
    expect(lineage(from).flat().some((i) => /^RUN npm ci\b.*--omit=dev/.test(i))).toBe(true);
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
      .flatMap((c) => c.split(/\s+/).slice(1, -1).filter((p) => !p.startsWith('--')));
    expect(sources).toEqual(expect.arrayContaining(['package.json', 'src', 'sql']));
    for (const src of sources) {
      await fs.access(path.join(projectRoot, src));
      expect(ignored, `${src} is copied but ignored`).not.toContain(src);
    }
  });
});

describe('the runtime stage layout', () => {
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const c of children) c.kill('SIGKILL');
  });

  /** Rebuilds /app as the runtime stage's COPY lines lay it out (node_modules linked, not copied). */
  async function layout(): Promise<string> {
    const app = await tempDir('dr-image-');
    for (const copy of instr(runtime, 'COPY')) {
      const parts = copy.split(/\s+/).slice(1).filter((p) => !p.startsWith('--'));
      const dest = parts.pop()!;
      for (const src of parts) {
        const from = src.startsWith('/app/') ? path.join(projectRoot, src.slice('/app/'.length)) : path.join(projectRoot, src);
        const to = dest.endsWith('/') ? path.join(app, dest, path.basename(src)) : path.join(app, dest);
        if (path.basename(src) === 'node_modules') await fs.symlink(from, to);
        else await fs.cp(from, to, { recursive: true });
      }
    }
    return app;
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

  it('starts with the image CMD against an external database, and the HEALTHCHECK command says healthy', async () => {
    const app = await layout();
    for (const dir of ['src', 'test', 'scripts', 'tsconfig.json']) {
      await expect(fs.access(path.join(app, dir))).rejects.toThrow();
    }
    const [cmd, ...cmdArgs] = execForm(instr(runtime, 'CMD')[0]!);
    const env = await testEnv();
    const child = spawn(cmd === 'node' ? process.execPath : cmd!, cmdArgs, {
      cwd: app,
      env: { PATH: process.env.PATH, ...env, LOG_LEVEL: 'info' } as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let output = '';
    const address = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no "public HTTP API listening" line; output:\n${output}`)), 60_000);
      const onData = (chunk: Buffer) => {
        output += chunk.toString('utf8');
        const line = output.split('\n').find((l) => l.includes('public HTTP API listening'));
        if (line) {
          clearTimeout(timer);
          resolve(loggedAddress(line));
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
      child.once('exit', (code) => reject(new Error(`exited with ${code}; output:\n${output}`)));
    });
    expect(healthcheck(Number(new URL(address).port))).toBe(0);
    child.kill('SIGTERM');
  });

  it('the HEALTHCHECK command says unhealthy when nothing answers', async () => {
    expect(healthcheck(await freePort())).toBe(1);
  });
});
