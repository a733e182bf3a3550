// Redocly's recommended rules (`@redocly/cli`) on the committed document, which the served one
// equals but for its servers (document.test.ts): no error, no warning, and nothing ignored
// beyond the ambiguous paths (the contract's two, and the credentials path of issue 21) and /health's
// missing 4xx (it answers every request, issue 24) listed in .redocly.lint-ignore.yaml.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';
import { readRepoFile } from '../deploy/files.js';

interface LintResult {
  totals: { errors: number; warnings: number; ignored: number };
  problems: Array<{ ruleId: string; message: string; location: Array<{ pointer: string }> }>;
}

function lint(file: string): LintResult {
  const res = spawnSync(process.execPath, [path.join(projectRoot, 'node_modules/@redocly/cli/bin/cli.js'), 'lint', file, '--format=json'], {
    cwd: projectRoot,
    // No telemetry, no update check: nothing leaves the machine.
    env: { PATH: process.env.PATH, HOME: process.env.HOME, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', CI: 'true' },
    encoding: 'utf8',
    timeout: 120_000,
  });
  const out = res.stdout;
  expect(out.indexOf('{'), res.stderr).toBeGreaterThanOrEqual(0);
  return JSON.parse(out.slice(out.indexOf('{'))) as LintResult;
}

describe('Redocly lint (recommended rules)', () => {
  it('the configuration is the recommended rules, unchanged', () => {
    expect(parse(readRepoFile('redocly.yaml'))).toEqual({ extends: ['recommended'] });
  });

  it('ignores only the ambiguous paths the contract (and issue 21) names, and /health having no 4xx (issue 24)', () => {
    expect(parse(readRepoFile('.redocly.lint-ignore.yaml'))).toEqual({
      'docs/openapi.json': {
        'operation-4xx-response': ['#/paths/~1health/get/responses'],
        'no-ambiguous-paths': ['#/paths/~1device~1{id}~1actuate', '#/paths/~1device~1gen_psk~1{id}', '#/paths/~1device~1{id}~1credentials'],
      },
    });
  });

  it('docs/openapi.json: no error and no warning', () => {
    const result = lint('docs/openapi.json');
    const listed = result.problems.map((p) => `${p.ruleId} ${p.location[0]?.pointer}: ${p.message}`);
    expect(listed).toEqual([]);
    expect(result.totals).toEqual({ errors: 0, warnings: 0, ignored: 4 });
  }, 120_000);
});
