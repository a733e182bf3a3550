// The layers of docs/architecture.md, checked: the test reads the layer table from the page,
// puts every source file in its layer and fails on an import that points upward, on an import
// circle, on a source file no row names, and on a source file the page does not name (its path, or
// its name beside its folder).
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/paths.js';

interface Layer {
  rank: number;
  name: string;
  patterns: RegExp[];
}

/** `**` any path, `*` any name within one folder. */
function globToRegExp(glob: string): RegExp {
  const escaped = glob.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  // Placeholders first, so the `*` of `**` is not read as a single-folder `*`.
  const pattern = escaped
    .replace(/\*\*\//g, '<DIRS>')
    .replace(/\*\*/g, '<ANY>')
    .replace(/\*/g, '[^/]*')
    .replace(/<DIRS>/g, '(?:.*/)?')
    .replace(/<ANY>/g, '.*');
  return new RegExp('^' + pattern + '$');
}

function readLayers(markdown: string): Layer[] {
  const table = /<!-- layers[^>]*-->([\s\S]*?)<!-- \/layers -->/.exec(markdown)?.[1];
  if (!table) throw new Error('docs/architecture.md has no layer table');
  const layers: Layer[] = [];
  for (const line of table.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const rank = Number(cells[1]);
    if (!Number.isInteger(rank) || !cells[1]) continue;
    const globs = [...(cells[3] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
    layers.push({ rank, name: cells[2] ?? '', patterns: globs.map(globToRegExp) });
  }
  return layers;
}

/** The highest layer whose pattern matches the file. */
function layerOf(layers: Layer[], file: string): Layer | undefined {
  let found: Layer | undefined;
  for (const layer of layers) if (layer.patterns.some((p) => p.test(file)) && (!found || layer.rank > found.rank)) found = layer;
  return found;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(path.join(projectRoot, dir), { withFileTypes: true })) {
    const rel = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(rel));
    else if (entry.name.endsWith('.ts')) out.push(rel);
  }
  return out;
}

/**
 * Relative imports and re-exports of a file, as TypeScript reads them: type-only ones (they are
 * dependencies too), side-effect imports (`import './x.js'`) and `import('./x.js')` included,
 * none in comments or strings.
 */
function importsOf(file: string): string[] {
  return importsIn(file, fs.readFileSync(path.join(projectRoot, file), 'utf8'));
}

function importsIn(file: string, text: string): string[] {
  return ts
    .preProcessFile(text, true, true)
    .importedFiles.map((f) => f.fileName)
    .filter((name) => /^\.{1,2}\//.test(name))
    .map((name) => path.posix.normalize(path.posix.join(path.posix.dirname(file), name)).replace(/\.js$/, '.ts'));
}

/**
 * In how many blocks of the page (a table row, a paragraph, a numbered step) `file` is named: by
 * its path, or by the end of its path where the block also names its folder (or one above it,
 * `src/` aside) or another file of its folder by path.
 */
function blocksNaming(page: string, file: string): number {
  const dir = path.posix.dirname(file);
  const names = (block: string) => [...block.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
  const placesIt = (n: string) =>
    (n.endsWith('/') && n !== 'src/' && file.startsWith(n)) || (n.includes('/') && !n.endsWith('/') && path.posix.dirname(n) === dir);
  return page
    .split(/\n(?=\|)|\n\s*\n|\n(?=\d+\. )/)
    .map(names)
    .filter((n) => n.includes(file) || (n.some((x) => file.endsWith('/' + x)) && n.some(placesIt))).length;
}

describe('layers (docs/architecture.md)', () => {
  const layers = readLayers(fs.readFileSync(path.join(projectRoot, 'docs/architecture.md'), 'utf8'));
  const files = [...sourceFiles('src'), ...sourceFiles('workers')].filter((f) => !f.endsWith('.d.ts'));

  it('the page names the layers, and every source file is in one', () => {
    expect(layers.map((l) => l.name)).toContain('foundation');
    expect(layers.length).toBeGreaterThanOrEqual(5);
    expect(files.filter((f) => !layerOf(layers, f))).toEqual([]);
  });

  it('the page names every source file (its path, or its name beside its folder)', () => {
    const page = fs.readFileSync(path.join(projectRoot, 'docs/architecture.md'), 'utf8');
    expect(blocksNaming(page, 'src/live/stream.ts')).toBeGreaterThan(0);
    const unnamed = files.filter((f) => blocksNaming(page, f) === 0);
    expect(unnamed).toEqual([]);
  });

  it('a name alone names the files of the folder its row, paragraph or step names, no others', () => {
    const page =
      '| `src/registry/` | per area `service.ts` |\n\n1. **Step** `src/ingest/router.ts`, then `shard.ts`.\n\n`src/` and `index.ts`';
    expect(blocksNaming(page, 'src/registry/devices/service.ts')).toBe(1);
    expect(blocksNaming(page, 'src/ingest/shard.ts')).toBe(1);
    // (before, found by an audit: `service.ts` anywhere on the page named every service.ts)
    expect(blocksNaming(page, 'src/live/service.ts')).toBe(0);
    expect(blocksNaming(page, 'src/registry/shard.ts')).toBe(0);
    expect(blocksNaming(page, 'src/db/index.ts')).toBe(0); // `src/` is every file's folder: it names none
  });

  it('no module imports from a higher layer', () => {
    const upward: string[] = [];
    for (const file of files) {
      const from = layerOf(layers, file);
      if (!from) continue; // reported by the test above
      for (const target of importsOf(file)) {
        const to = layerOf(layers, target);
        if (to && to.rank > from.rank) upward.push(`${file} (${from.name}) imports ${target} (${to.name})`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('no import circles', () => {
    const graph = new Map(files.map((f) => [f, importsOf(f).filter((t) => t !== f)]));
    const state = new Map<string, 'open' | 'done'>();
    const circles: string[] = [];
    const visit = (file: string, trail: string[]): void => {
      if (state.get(file) === 'done') return;
      if (state.get(file) === 'open') {
        circles.push([...trail.slice(trail.indexOf(file)), file].join(' -> '));
        return;
      }
      state.set(file, 'open');
      for (const next of graph.get(file) ?? []) visit(next, [...trail, file]);
      state.set(file, 'done');
    };
    for (const file of files) visit(file, []);
    expect(circles).toEqual([]);
  });

  it('catches what it is meant to catch (the rules applied to made-up imports)', () => {
    const registry = layerOf(layers, 'src/registry/devices/service.ts')!;
    const route = layerOf(layers, 'src/registry/devices/routes.ts')!;
    const http = layerOf(layers, 'src/http/server.ts')!;
    const broker = layerOf(layers, 'src/broker/link.ts')!;
    const ingest = layerOf(layers, 'src/ingest/router.ts')!;
    expect(http.rank).toBeGreaterThan(registry.rank); // a service importing src/http is upward
    expect(route.rank).toBeGreaterThan(http.rank); // routes may use the adapter's types
    expect(ingest.rank).toBeGreaterThan(broker.rank); // the broker importing ingest is upward
    expect(globToRegExp('src/**/routes.ts').test('src/routes.ts')).toBe(true);
    expect(globToRegExp('src/db/**').test('src/dbx/pool.ts')).toBe(false);
    // Every form of import is read (before, found by an audit: a side-effect import, or one whose
    // braces held a comment with an apostrophe, was not), and none in a comment or a string.
    const text = [
      "import './side.js';",
      "import {\n  // the router's\n  IngestRouter,\n} from '../ingest/router.js';",
      "export * from './again.js';",
      "const lazy = () => import('../http/server.js');",
      "// import { x } from './commented.js';",
      'const s = "import { y } from \'./quoted.js\'";',
    ].join('\n');
    expect(importsIn('src/broker/link.ts', text).sort()).toEqual(
      ['src/broker/again.ts', 'src/broker/side.ts', 'src/http/server.ts', 'src/ingest/router.ts'].sort(),
    );
  });
});
