// Reading the deployment files in tests without a YAML library: docker-compose.yml is plain
// block-style YAML that we write ourselves, so a small indentation reader is enough, plus
// compose's `${VAR}`, `${VAR:-default}` and `${VAR:?message}` interpolation.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../src/paths.js';

export const repoFile = (...parts: string[]) => path.join(projectRoot, ...parts);
export const readRepoFile = (...parts: string[]) => readFileSync(repoFile(...parts), 'utf8');

const indentOf = (line: string) => line.length - line.trimStart().length;
const meaningful = (line: string) => line.trim() !== '' && !line.trimStart().startsWith('#');

/** The lines below `a:` → `b:` → ... (each key at the shallowest indentation of its parent). */
export function yamlBlock(text: string, keys: string[]): string[] {
  let lines = text.split('\n').filter(meaningful);
  for (const key of keys) {
    const base = Math.min(...lines.map(indentOf));
    const start = lines.findIndex((l) => indentOf(l) === base && l.trim() === `${key}:`);
    if (start < 0) throw new Error(`docker-compose.yml has no "${keys.join('.')}" block`);
    let end = start + 1;
    while (end < lines.length && indentOf(lines[end]!) > base) end++;
    lines = lines.slice(start + 1, end);
  }
  return lines;
}

/** `key: value` lines of a block (its shallowest level) as an object; quotes removed. */
export function yamlMapping(lines: string[]): Record<string, string> {
  const base = Math.min(...lines.map(indentOf));
  const out: Record<string, string> = {};
  for (const line of lines) {
    if (indentOf(line) !== base) continue;
    const m = /^\s*([^:\s]+):(?:\s+(.*))?$/.exec(line);
    if (!m) continue;
    out[m[1]!] = (m[2] ?? '').replace(/^"(.*)"$/, '$1').replace(/^'(.*)'$/, '$1');
  }
  return out;
}

/** `- item` lines of a block, quotes removed. */
export function yamlList(lines: string[]): string[] {
  return lines
    .filter((l) => l.trimStart().startsWith('- '))
    .map((l) =>
      l
        .trim()
        .slice(2)
        .replace(/^"(.*)"$/, '$1'),
    );
}

/** Names of the variables a compose file interpolates (`$$` is a literal dollar). */
export function interpolatedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)/g)) if (m[1]) names.add(m[1]);
  return names;
}

/** Compose interpolation of one value; throws like compose on `${VAR:?message}`. */
export function interpolate(value: string, vars: Record<string, string | undefined>): string {
  return value.replace(
    /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}/g,
    (whole, name: string, op: string | undefined, arg: string) => {
      if (whole === '$$') return '$';
      const v = vars[name];
      const missing = v === undefined || (op?.startsWith(':') === true && v === '');
      if (!op) return v ?? '';
      if (op.endsWith('-')) return missing ? arg : v;
      if (missing) throw new Error(`${name}: ${arg}`);
      return v;
    },
  );
}

/** `KEY=value` lines of an env file. */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) out[m[1]!] = m[2]!;
  }
  return out;
}

export interface DockerfileStage {
  name: string;
  from: string;
  /** Instructions with line continuations joined. */
  instructions: string[];
}

/** The stages of a Dockerfile, with the global ARG defaults applied to their FROM. */
export function dockerfileStages(text: string): { args: Record<string, string>; stages: DockerfileStage[] } {
  const joined = text
    .replace(/\\\r?\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const args: Record<string, string> = {};
  const stages: DockerfileStage[] = [];
  for (const line of joined) {
    const from = /^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) {
      const image = from[1]!.replace(/\$\{?([A-Z_]+)\}?/g, (_, n: string) => args[n] ?? '');
      stages.push({ name: from[2] ?? String(stages.length), from: image, instructions: [] });
      continue;
    }
    if (stages.length === 0) {
      const arg = /^ARG\s+([A-Z_]+)=(\S+)/i.exec(line);
      if (arg) args[arg[1]!] = arg[2]!;
      continue;
    }
    stages[stages.length - 1]!.instructions.push(line);
  }
  return { args, stages };
}

function works(cmd: string, args: string[]): boolean {
  try {
    execFileSync(cmd, args, { stdio: 'ignore', timeout: 20_000 });
    return true;
  } catch {
    return false;
  }
}

/** The compose CLI: the docker plugin (`docker compose`), else a standalone `docker-compose`. */
export function composeCli(): string[] | undefined {
  if (works('docker', ['compose', 'version'])) return ['docker', 'compose'];
  if (works('docker-compose', ['version'])) return ['docker-compose'];
  return undefined;
}

export function commandExists(cmd: string): boolean {
  return works('sh', ['-c', `command -v ${cmd}`]);
}

/** Mosquitto's dynamic-security plugin on this machine, if installed. */
export function dynsecPlugin(): string | undefined {
  return [
    '/usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so',
    '/usr/lib/aarch64-linux-gnu/mosquitto_dynamic_security.so',
    '/usr/lib/mosquitto_dynamic_security.so',
    '/usr/local/lib/mosquitto_dynamic_security.so',
  ].find((p) => existsSync(p));
}
