// INGEST_THREAD_NICE (docs/operations.md §3, CPU): the router thread and the shard workers it
// starts run at the configured nice value, the HTTP (main) thread keeps the process's; 0 (the
// default) leaves every thread as it was. Read from /proc of a spawned service (Linux).
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { testEnv, useSpawnedServices } from '../helpers/service.js';

const services = useSpawnedServices();

/** The nice value of each thread of `pid`, by thread id. */
function threadNice(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    const stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    // Fields after the command name: state is field 3, nice field 19.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    out.set(Number(tid), Number(fields[16]));
  }
  return out;
}

describe('the ingest threads priority', () => {
  it.skipIf(process.platform !== 'linux')('INGEST_THREAD_NICE=7: the router and shard threads at 7, the HTTP thread at 0', async () => {
    const { svc } = await services.ready(
      await testEnv({ INGEST_THREAD_NICE: '7', INGEST_WORKERS: '2', LOG_LEVEL: 'info', LOG_FORMAT: 'json' }),
    );
    const pid = svc.child.pid!;
    const nice = threadNice(pid);
    expect(nice.get(pid)).toBe(0);
    // The router thread and two shard workers (and the helper threads they started).
    expect([...nice.values()].filter((n) => n === 7).length).toBeGreaterThanOrEqual(3);
    expect([...nice.values()].every((n) => n === 0 || n === 7)).toBe(true);
    svc.child.kill('SIGTERM');
    await svc.exited;
  });

  it.skipIf(process.platform !== 'linux')('by default every thread keeps the process priority', async () => {
    const { svc } = await services.ready(await testEnv({ INGEST_WORKERS: '2', LOG_LEVEL: 'info', LOG_FORMAT: 'json' }));
    const nice = threadNice(svc.child.pid!);
    expect([...nice.values()].every((n) => n === 0)).toBe(true);
    svc.child.kill('SIGTERM');
    await svc.exited;
  });
});
