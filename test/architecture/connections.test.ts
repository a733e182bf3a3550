// Every PostgreSQL connection the service opens starts with the session settings of
// src/db/limits.ts (SESSION_OPTIONS: DateStyle ISO, without which times read through text were
// hours off on some databases). The test reads the sources: each `new pg.Pool(...)` and
// `new pg.Client(...)` of src/ and workers/ passes them in its options.
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(path.join(projectRoot, dir), { withFileTypes: true })) {
    const rel = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(rel));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

/** The argument text of each `new pg.Pool(` / `new pg.Client(` in `text` (to its closing parenthesis). */
function connectionSites(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/\bnew\s+pg\.(?:Pool|Client)\s*\(/g)) {
    let depth = 1;
    let i = m.index + m[0].length;
    for (; i < text.length && depth > 0; i++) {
      if (text[i] === '(') depth++;
      else if (text[i] === ')') depth--;
    }
    out.push(text.slice(m.index, i));
  }
  return out;
}

describe('database connections (src/db/limits.ts SESSION_OPTIONS)', () => {
  const files = [...sourceFiles('src'), ...sourceFiles('workers')];

  it('every connection the service opens starts with the session settings', () => {
    const sites = files.flatMap((f) => connectionSites(fs.readFileSync(path.join(projectRoot, f), 'utf8')).map((site) => ({ f, site })));
    // The API pool, the ingest router's, the shard workers', the live feed's and the registry listener.
    expect(sites.length).toBeGreaterThanOrEqual(5);
    expect(sites.filter((s) => !/\boptions:[^,}]*\bSESSION_OPTIONS\b/.test(s.site)).map((s) => s.f)).toEqual([]);
  });

  it('a connection made without them is found', () => {
    const text =
      'const a = new pg.Pool({ connectionString: url, max: 2, ...limits(x) });\nconst b = new pg.Client({ options: SESSION_OPTIONS });';
    const sites = connectionSites(text);
    expect(sites).toHaveLength(2);
    expect(sites.map((s) => /\boptions:[^,}]*\bSESSION_OPTIONS\b/.test(s))).toEqual([false, true]);
  });
});
