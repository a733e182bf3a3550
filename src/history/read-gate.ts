// Ingest first: the heavy history reads (aggregates, latest values of many devices) yield to
// ingest when the host has no CPU to spare. While the gate is closed (ingest has messages in
// hand and the host's cores are saturated) those reads run one at a time on a lane whose read
// time is budgeted: it earns HISTORY_READ_SHARE_PERCENT of the time passing, up to a burst of
// BURST_SECONDS' worth, and each read spends what it took. A closed loop of readers then costs
// ingest a bounded share instead of whatever it can take, while a reader that keeps within the
// share on average (a dashboard's paced reads) is not held for one slow read
// (docs/messaging.md §6, "Readers and ingest"). With CPU to spare the gate is open and reads
// run at once, as many as the database pool serves. Raw reads (the contract's history) and
// exports never wait here.
import client from 'prom-client';
import { errors } from '../errors.js';

/** The host's CPUs are saturated at this busy share (of all cores, in a sample of the last second: src/host-cpu.ts). */
export const SATURATED = 0.9;
/** Reads held at once by the service; one more is answered 503 (each holds an HTTP request, nothing else). */
export const MAX_HELD_READS = 1000;
/** While the lane rests, how often the gate looks whether it opened. */
const RECHECK_MS = 250;
/** The lane's budget holds at most what it earns in this many seconds (share x 2 s: 200 ms of reads at 10 %). */
export const BURST_SECONDS = 2;

export interface ReadGateOptions {
  /** 1..100: the share of time held reads may take while the gate is closed; 100: never closed. */
  sharePercent: number;
  /** True while reads would take CPU from ingest (ingest busy and the host saturated). */
  closed: () => boolean;
  /** Reads held at once; one more is refused with 503. */
  maxWaiting: number;
  registry: client.Registry;
}

export class ReadGate {
  /** Each held read's start: resolved with true (runs on the lane) or false (the gate opened). */
  private readonly waiting: Array<(onLane: boolean) => void> = [];
  private laneBusy = false;
  /** Read time (ms) the lane may still spend: earned at `rate` per ms passing, up to `burst`; negative after an overdraft. */
  private credit: number;
  private creditAt = performance.now();
  private readonly rate: number;
  private readonly burst: number;
  private timer: NodeJS.Timeout | undefined;
  private readonly held: client.Counter;

  constructor(private readonly opts: ReadGateOptions) {
    this.rate = opts.sharePercent / 100;
    this.burst = this.rate * BURST_SECONDS * 1000;
    this.credit = this.burst;
    const waiting = this.waiting;
    new client.Gauge({
      name: 'history_reads_waiting',
      help: 'Aggregate and latest-value history reads held by the read gate while ingest has the CPU',
      registers: [opts.registry],
      collect() {
        this.set(waiting.length);
      },
    });
    this.held = new client.Counter({
      name: 'history_reads_held_total',
      help: 'Aggregate and latest-value history reads that waited at the read gate (the host was saturated with ingest running)',
      registers: [opts.registry],
    });
  }

  /** Runs `read` now, or when the gate lets it; rejects with 503 when too many are waiting. */
  async run<T>(read: () => Promise<T>): Promise<T> {
    if (this.opts.sharePercent >= 100 || (this.waiting.length === 0 && !this.opts.closed())) return read();
    if (this.waiting.length >= this.opts.maxWaiting) throw errors.historyReadsBusy();
    this.held.inc();
    const onLane = await new Promise<boolean>((resolve) => {
      this.waiting.push(resolve);
      this.pump();
    });
    if (!onLane) return read();
    const started = performance.now();
    try {
      return await read();
    } finally {
      this.credit -= this.earn() - started;
      this.laneBusy = false;
      this.pump();
    }
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    // Whatever waits runs now: the service is stopping and answers what it took.
    for (const start of this.waiting.splice(0)) start(false);
  }

  /** Adds what the lane earned since the last call (up to the burst); returns the time it counted to. */
  private earn(): number {
    const now = performance.now();
    this.credit = Math.min(this.burst, this.credit + (now - this.creditAt) * this.rate);
    this.creditAt = now;
    return now;
  }

  /** Starts what may start: everything once the gate is open, else the lane's next read once its budget is not overdrawn. */
  private pump(): void {
    if (this.timer) return;
    if (!this.opts.closed()) {
      for (const start of this.waiting.splice(0)) start(false);
      return;
    }
    if (this.laneBusy || this.waiting.length === 0) return;
    this.earn();
    // An overdraft is earned back in -credit / rate: after a read of t ms with nothing left,
    // the lane rests t x (100 / share - 1), so reads fill `share` of its time.
    const rest = -this.credit / this.rate;
    if (rest > 0) {
      // Looked at again at least every RECHECK_MS: if the gate opens meanwhile, the held reads go at once.
      this.timer = setTimeout(
        () => {
          this.timer = undefined;
          this.pump();
        },
        Math.min(rest, RECHECK_MS),
      );
      return;
    }
    this.laneBusy = true;
    this.waiting.shift()!(true);
  }
}
