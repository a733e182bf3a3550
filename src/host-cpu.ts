// How busy the host's CPUs are: the share of all cores' time spent not idle over the last
// sample (os.cpus() counters, /proc/stat on Linux). The history read gate uses it to tell a
// saturated host, where a read takes CPU from ingest, from one with CPU to spare.

import os from 'node:os';

/** Idle and total CPU time of all cores since boot, ms. */
function counters(): { idle: number; total: number } {
  let idle = 0;
  let total = 0;
  for (const c of os.cpus()) {
    idle += c.times.idle;
    total += c.times.user + c.times.nice + c.times.sys + c.times.idle + c.times.irq;
  }
  return { idle, total };
}

export class HostCpu {
  private last = counters();
  private busyShare = 0;
  private readonly timer: NodeJS.Timeout;

  /** Samples every `everyMs`; the first figure is ready after one period (0 until then). */
  constructor(everyMs = 500) {
    this.timer = setInterval(() => this.sample(), everyMs);
    this.timer.unref();
  }

  /** 0..1: the share of all cores' time that was not idle during the last period. */
  get busy(): number {
    return this.busyShare;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private sample(): void {
    const now = counters();
    const total = now.total - this.last.total;
    if (total > 0) this.busyShare = 1 - (now.idle - this.last.idle) / total;
    this.last = now;
  }
}
