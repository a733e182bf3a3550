// The ingest threads' CPU priority (INGEST_THREAD_NICE). On Linux the nice value belongs to a
// thread, and threads it starts inherit it: the router thread lowers its own before it starts
// the shard workers, so ingest yields the CPU to the HTTP thread (and the database's read
// backends) when both want it, and still takes every cycle nobody else asks for.
import os from 'node:os';

/** Lowers the calling thread's priority to `nice` (0..19; 0 leaves it). False where the system refuses. */
export function lowerThreadPriority(nice: number): boolean {
  if (nice <= 0) return true;
  try {
    // pid 0: the calling thread on Linux (elsewhere the process).
    os.setPriority(0, nice);
    return true;
  } catch {
    return false;
  }
}
