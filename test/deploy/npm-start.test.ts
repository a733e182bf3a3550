// `npm start` (README, "Run") run by a supervisor, or stopped with `kill`: a SIGTERM or SIGINT to
// the npm process alone reaches the service, which shuts down as docs/operations.md §10 says,
// and npm exits 0. No service is left running without its npm.
import { execFileSync, spawn } from 'node:child_process';
import { afterAll, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { zeroSetupEnv } from '../helpers/service.js';

const left: number[] = [];

// What a failure left running: npm, and the service, which stops its embedded PostgreSQL itself.
afterAll(async () => {
  for (const pid of left) if (isRunning(pid)) process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + 15_000;
  while (left.some(isRunning) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
});

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The service's process (`node dist/src/main.js`) among the descendants of `root`. */
function serviceUnder(root: number): number | undefined {
  const rows = execFileSync('ps', ['-eo', 'pid=,ppid=,args='], { encoding: 'utf8' })
    .split('\n')
    .map((l) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(l))
    .filter((m) => m !== null)
    .map((m) => ({ pid: Number(m[1]), ppid: Number(m[2]), args: m[3]! }));
  const tree = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const r of rows) if (tree.has(r.ppid) && !tree.has(r.pid)) grew = Boolean(tree.add(r.pid));
  }
  return rows.find((r) => tree.has(r.pid) && /^node\b.*dist\/src\/main\.js/.test(r.args))?.pid;
}

it.each(['SIGTERM', 'SIGINT'] as const)(
  '%s to `npm start` alone stops the service cleanly, and npm exits 0',
  { timeout: 120_000 },
  async (signal) => {
    const env = await zeroSetupEnv({ LOG_FORMAT: 'json' });
    const npm = spawn('npm', ['start'], {
      cwd: projectRoot,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    for (const stream of [npm.stdout, npm.stderr]) stream.on('data', (c: Buffer) => (output += c.toString()));
    left.push(npm.pid!);
    const exited = new Promise<string>((resolve) => npm.on('exit', (code, sig) => resolve(sig ?? String(code))));
    const deadline = Date.now() + 90_000;
    while (!output.includes('"msg":"ready"') && npm.exitCode === null && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    expect(output).toContain('"msg":"ready"');
    const service = serviceUnder(npm.pid!);
    expect(service).toBeDefined();
    left.push(service!);

    npm.kill(signal);
    // npm ends when the service does (or at once, killed by the signal, before: 'SIGTERM').
    expect(await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running after 15 s'), 15_000))])).toBe('0');
    const stopDeadline = Date.now() + 15_000;
    while (isRunning(service!) && Date.now() < stopDeadline) await new Promise((r) => setTimeout(r, 100));
    expect(isRunning(service!), 'the service runs on after npm exited').toBe(false);
    expect(output).toContain(`"signal":"${signal}"`);
    expect(output).toContain('"msg":"stopped"');
  },
);
