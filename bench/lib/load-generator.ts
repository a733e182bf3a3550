// The MQTT load generator (bench/ingest-load.ts) as its own process, reporting progress over IPC
// every 200 ms; shared by the benchmarks that ingest while they measure something else.
import { fork } from 'node:child_process';
import path from 'node:path';
import { projectRoot } from '../../src/paths.js';
import type { LoadConfig, LoadProgress } from '../ingest-load.js';

export function generator(cfg: LoadConfig): { latest: () => LoadProgress | undefined; ready: Promise<void>; stop: () => Promise<void> } {
  const proc = fork(path.join(projectRoot, 'dist/bench/ingest-load.js'), [JSON.stringify(cfg)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let latest: LoadProgress | undefined;
  const ready = new Promise<void>((resolve, reject) => {
    proc.on('message', (m: { type: string }) => {
      if (m.type === 'ready') resolve();
      if (m.type === 'progress') latest = m as LoadProgress;
    });
    proc.once('exit', (code) => reject(new Error(`ingest-load exited with ${code}`)));
  });
  return {
    latest: () => latest,
    ready,
    stop: () =>
      new Promise((resolve) => {
        proc.once('exit', () => resolve());
        proc.send({ type: 'stop' });
      }),
  };
}
