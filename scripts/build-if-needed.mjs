// `npm start` runs the compiled service; this builds it first when dist/ is missing or older
// than a source file. In a production image (no TypeScript installed) it only checks dist/.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync, utimesSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const entry = path.join(root, 'dist/src/main.js');

function newest(dir) {
  let t = 0;
  if (!existsSync(dir)) return t;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

const built = existsSync(entry) ? statSync(entry).mtimeMs : 0;
const sources = Math.max(
  ...['src', 'workers', 'bench'].map((d) => newest(path.join(root, d))),
  statSync(path.join(root, 'tsconfig.json')).mtimeMs,
);
if (built === 0 || sources > built) {
  let tsc;
  try {
    tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  } catch {
    if (built === 0) {
      console.error('dist/ is missing and TypeScript is not installed: run `npm ci` (with dev dependencies) and `npm run build`');
      process.exit(1);
    }
    process.exit(0);
  }
  console.error('building (tsc)...');
  execFileSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.json')], { stdio: 'inherit' });
  // tsc leaves unchanged outputs alone; mark the build as newer than the sources.
  const now = new Date();
  utimesSync(entry, now, now);
}
