// How busy the host's CPUs are: the share of all cores' time spent not idle, sampled every
// 250 ms from the kernel's counters (os.cpus(), /proc/stat on Linux). The history read gate
// uses it to tell a saturated host, where a read takes CPU from ingest, from one with CPU to
// spare; it reads the highest sample of the last second, so that one quieter sample among busy
// ones does not count as CPU to spare.

import os from 'node:os';

const SAMPLE_MS = 250;
/** Samples kept: the last second. */
const KEPT = 4;

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
  private readonly samples: number[] = [];
  private readonly timer: NodeJS.Timeout;

  constructor() {
    this.timer = setInterval(() => this.sample(), SAMPLE_MS);
    this.timer.unref();
  }

  /** 0..1: the highest share of all cores' time that was not idle in a sample of the last second (0 before the first). */
  get busy(): number {
    return this.samples.length === 0 ? 0 : Math.max(...this.samples);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private sample(): void {
    const now = counters();
    const total = now.total - this.last.total;
    if (total > 0) {
      this.samples.push(1 - (now.idle - this.last.idle) / total);
      if (this.samples.length > KEPT) this.samples.shift();
    }
    this.last = now;
  }
}
