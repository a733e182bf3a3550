// The README's deployment section and docs/operations.md: they link every deployment piece,
// name the command that starts it and every secret, and their links lead to files that exist.
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { readRepoFile, repoFile } from './files.js';

const readme = readRepoFile('README.md');
const deployment = readme.slice(readme.indexOf('## Deployment'), readme.indexOf('\n## ', readme.indexOf('## Deployment') + 1));
const operations = readRepoFile('docs/operations.md');
/** The variables compose requires (`${NAME:?message}`): the secrets. */
const secrets = [...new Set([...readRepoFile('docker-compose.yml').matchAll(/\$\{([A-Z_]+):\?/g)].map((m) => m[1]!))];

/** Relative markdown link targets of a document in `dir`. */
function links(text: string, dir: string): string[] {
  return [...text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)]
    .map((m) => m[1]!)
    .filter((t) => !/^[a-z]+:/.test(t))
    .map((t) => path.join(dir, t));
}

describe('README, Deployment', () => {
  it('links every piece and names the command that starts it', () => {
    expect(deployment.startsWith('## Deployment')).toBe(true);
    for (const target of ['Dockerfile', 'docker-compose.yml', 'deploy/mosquitto', 'docs/operations.md', '.env.example']) {
      expect(deployment).toContain(`](${target})`);
    }
    for (const command of ['npm start', 'docker build -t device-registry .', 'docker compose up']) expect(deployment).toContain(command);
  });

  it('names every secret the compose file requires', () => {
    expect(secrets.length).toBeGreaterThanOrEqual(6);
    for (const name of secrets) expect(deployment).toContain(`\`${name}\``);
  });

  it('links only files that exist', async () => {
    for (const target of links(deployment, repoFile())) await fs.access(target);
  });
});

describe('docs/operations.md', () => {
  it('links only files that exist', async () => {
    const targets = links(operations, repoFile('docs'));
    expect(targets.length).toBeGreaterThan(0);
    for (const target of targets) await fs.access(target);
  });

  it('covers sizing, backup and restore, key rotation and scale-out, saying what was measured', () => {
    for (const heading of ['Sizing', 'Backup and restore', 'Key rotation', 'Scaling out'])
      expect(operations).toMatch(new RegExp(`^## \\d+\\. ${heading}`, 'm'));
    for (const word of [
      'pg_dump',
      'timescaledb_pre_restore()',
      'timescaledb_post_restore()',
      'JWT_SECRET',
      'PSK_ENCRYPTION_KEY',
      'EMQX',
      'VerneMQ',
      'NOTIFY',
      '$share',
    ]) {
      expect(operations).toContain(word);
    }
    expect(operations).toMatch(/measured/i);
    expect(operations).toMatch(/reasoning/i);
  });

  it('explains every secret the compose file requires', () => {
    for (const name of secrets) expect(operations).toContain(`\`${name}\``);
  });
});
