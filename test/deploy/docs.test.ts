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

  it('walks from `docker compose up` to the dashboard, and covers health, logs, metrics, alerts and rolling restarts', () => {
    const first = operations.slice(operations.indexOf('## 1. '), operations.indexOf('\n## 2. '));
    for (const step of [
      'docker compose up -d',
      'curl -s localhost:8000/health/ready',
      'http://localhost:3000',
      '`GRAFANA_ADMIN_PASSWORD`',
      'mosquitto_pub',
      '"Ingest rate"',
    ]) {
      expect(first).toContain(step);
    }
    for (const heading of ['Health, logs and metrics', 'Dashboard and alerts', 'Rolling restarts'])
      expect(operations).toMatch(new RegExp(`^## \\d+\\. ${heading}`, 'm'));
    for (const word of [
      '/health/live',
      '/health/ready',
      'X-Request-Id',
      'LOG_FORMAT',
      'REDACT_PATHS',
      'SHUTDOWN_TIMEOUT_MS',
      'IngestStalled',
      'MemoryNearLimit',
    ])
      expect(operations).toContain(word);
  });

  it("the load balancer example passes on the client's scheme, which the served /openapi.json names", () => {
    const haproxy = /^frontend device_registry_public$([\s\S]*?)^```$/m.exec(operations)?.[1] ?? '';
    expect(haproxy).toContain('bind :443 ssl');
    expect(haproxy).toContain('http-request set-header X-Forwarded-Proto https');
  });

  it('explains every secret the compose file requires', () => {
    for (const name of secrets) expect(operations).toContain(`\`${name}\``);
  });
});
