// MQTT load generator for the ingest benchmarks: simulated devices on raw TCP sockets sending
// pre-encoded QoS 1 PUBLISH packets (only the packet id is patched per message), reading PUBACKs
// with a 4-byte scanner. mqtt.js would be the bottleneck; this is not.
//
// Run as a child process (bench/ingest.ts forks it with IPC) or by hand:
//   node dist/bench/ingest-load.js '{"url":"mqtt://127.0.0.1:1883","tenant":"t","devices":["a1"],"rate":0,...}'
// Each device has its own connection (username `<tenant>:<id>`) unless devicesPerConnection > 1.
// rate 0: flat out, every device keeps `window` messages in flight; rate > 0: that many
// messages per second over all devices (token bucket, 5 ms ticks), still at most `window` in
// flight per device; the parent may change the rate ({type:'rate', rate}). Progress goes to
// the parent every 200 ms: { sent, acked, connected }.
import crypto from 'node:crypto';
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import { AckStats } from './lib/ack-stats.js';

export interface LoadConfig {
  url: string;
  tenant: string;
  /** Device ids `from` .. `from + count - 1`, as 6 hex digits (what bench/ingest.ts creates). */
  devices: { from: number; count: number };
  devicesPerConnection: number;
  /** Messages per second over all devices; 0: as fast as acknowledgements come back. */
  rate: number;
  window: number;
  connectConcurrency: number;
  /** Time every message to its PUBACK: progress then carries `acks` (bench/lib/ack-stats.ts). */
  ackStats?: boolean;
}

export interface LoadProgress {
  type: 'progress';
  sent: number;
  acked: number;
  connected: number;
  failed: number;
  /** With `ackStats`: latencies (histogram pairs) and the longest gap without a PUBACK since the previous report. */
  acks?: { lat: Array<[number, number]>; maxGapMs: number };
}

const PAYLOAD = Buffer.from(JSON.stringify({ temperature: 21.5, humidity: 40.25, pressure: 1013.2 }));

interface Lane {
  /** Pre-encoded PUBLISH for this device; bytes [idAt, idAt+2) are the packet id. */
  template: Buffer;
  idAt: number;
  inflight: number;
}

interface Conn {
  socket: net.Socket;
  lanes: Lane[];
  /** packet id -> lane index */
  pending: Map<number, number>;
  /** packet id -> performance.now() when sent (with `ackStats`). */
  sentAt: Map<number, number>;
  nextId: number;
  ready: boolean;
  rest: Buffer | undefined;
}

function publishTemplate(topic: string): Lane {
  const template = mqttPacket.generate({ cmd: 'publish', topic, payload: PAYLOAD, qos: 1, dup: false, retain: false, messageId: 1 });
  return { template, idAt: template.length - PAYLOAD.length - 2, inflight: 0 };
}

export function deviceIds(range: { from: number; count: number }): string[] {
  return Array.from({ length: range.count }, (_, i) => (range.from + i).toString(16).padStart(6, '0'));
}

export async function runLoad(
  cfg: LoadConfig,
  report: (p: LoadProgress) => void,
): Promise<{ stop(): Promise<void>; setRate(rate: number): void }> {
  const url = new URL(cfg.url);
  const port = Number(url.port || 1883);
  const conns: Conn[] = [];
  let sent = 0;
  let acked = 0;
  let failed = 0;
  let running = true;
  const ackStats = cfg.ackStats ? new AckStats() : undefined;

  const send = (c: Conn, laneIndex: number) => {
    const lane = c.lanes[laneIndex]!;
    let id = c.nextId;
    // Skip ids still in flight (65535 of them is far more than any window).
    while (c.pending.has(id)) id = id === 65535 ? 1 : id + 1;
    c.nextId = id === 65535 ? 1 : id + 1;
    const buf = Buffer.allocUnsafe(lane.template.length);
    lane.template.copy(buf);
    buf[lane.idAt] = id >> 8;
    buf[lane.idAt + 1] = id & 0xff;
    c.pending.set(id, laneIndex);
    if (ackStats) c.sentAt.set(id, performance.now());
    lane.inflight++;
    sent++;
    c.socket.write(buf);
  };

  const onAck = (c: Conn, id: number) => {
    const laneIndex = c.pending.get(id);
    if (laneIndex === undefined) return;
    c.pending.delete(id);
    if (ackStats) {
      const now = performance.now();
      ackStats.record(now - c.sentAt.get(id)!, now);
      c.sentAt.delete(id);
    }
    const lane = c.lanes[laneIndex]!;
    lane.inflight--;
    acked++;
    if (running && cfg.rate === 0) send(c, laneIndex);
  };

  const parse = (c: Conn, chunk: Buffer) => {
    const buf = c.rest ? Buffer.concat([c.rest, chunk]) : chunk;
    let i = 0;
    while (buf.length - i >= 2) {
      const type = buf[i]! >> 4;
      const len = buf[i + 1]!; // CONNACK/PUBACK have remaining length 2 (3.1.1)
      if (buf.length - i < 2 + len) break;
      if (type === 4) onAck(c, (buf[i + 2]! << 8) | buf[i + 3]!);
      else if (type === 2) {
        if (buf[i + 3] !== 0) {
          failed++;
          c.socket.destroy();
          return;
        }
        c.ready = true;
        if (cfg.rate === 0) for (let l = 0; l < c.lanes.length; l++) for (let w = 0; w < cfg.window; w++) send(c, l);
      }
      i += 2 + len;
    }
    c.rest = i < buf.length ? buf.subarray(i) : undefined;
    if (c.rest) c.rest = Buffer.from(c.rest);
  };

  // Client ids of this run's own (the device's id alone would be the same in every benchmark
  // run: two runs against one broker would take over each other's connections).
  const run = crypto.randomBytes(3).toString('hex');
  const connect = (devices: string[]) =>
    new Promise<void>((resolve) => {
      const clientId = `bench-${run}-${devices[0]}`;
      const socket = net.connect({ host: url.hostname, port });
      socket.setNoDelay(true);
      const c: Conn = {
        socket,
        lanes: devices.map((d) => publishTemplate(`${cfg.tenant}:${d}/attrs`)),
        pending: new Map(),
        sentAt: new Map(),
        nextId: 1,
        ready: false,
        rest: undefined,
      };
      conns.push(c);
      socket.on('connect', () => {
        socket.write(
          mqttPacket.generate({
            cmd: 'connect',
            protocolId: 'MQTT',
            protocolVersion: 4,
            clientId,
            clean: true,
            keepalive: 0,
            username: `${cfg.tenant}:${devices[0]}`,
          }),
        );
      });
      socket.on('data', (chunk: Buffer) => {
        const wasReady = c.ready;
        parse(c, chunk);
        if (!wasReady && c.ready) resolve();
      });
      socket.on('error', () => undefined);
      socket.on('close', () => {
        if (!c.ready) {
          failed++;
          resolve();
        }
      });
    });

  // Connect in waves.
  const ids = deviceIds(cfg.devices);
  const groups: string[][] = [];
  for (let i = 0; i < ids.length; i += cfg.devicesPerConnection) groups.push(ids.slice(i, i + cfg.devicesPerConnection));
  for (let i = 0; i < groups.length; i += cfg.connectConcurrency) {
    await Promise.all(groups.slice(i, i + cfg.connectConcurrency).map(connect));
  }

  let ticker: NodeJS.Timeout | undefined;
  if (cfg.rate > 0) {
    // Token bucket over all lanes, round robin.
    const lanes: Array<[Conn, number]> = [];
    for (const c of conns) if (c.ready) for (let l = 0; l < c.lanes.length; l++) lanes.push([c, l]);
    let cursor = 0;
    let budget = 0;
    let last = performance.now();
    ticker = setInterval(() => {
      const now = performance.now();
      budget = Math.min(budget + ((now - last) / 1000) * cfg.rate, cfg.rate / 5); // at most 200 ms of burst (late timers)
      last = now;
      let skipped = 0;
      while (budget >= 1 && skipped < lanes.length) {
        const [c, l] = lanes[cursor]!;
        cursor = (cursor + 1) % lanes.length;
        if (c.lanes[l]!.inflight >= cfg.window || c.socket.destroyed) {
          skipped++;
          continue;
        }
        skipped = 0;
        send(c, l);
        budget--;
      }
    }, 5);
  }
  const progress = (): LoadProgress => ({
    type: 'progress',
    sent,
    acked,
    connected: conns.filter((c) => c.ready).length,
    failed,
    ...(ackStats ? { acks: ackStats.take(performance.now()) } : {}),
  });
  const reporter = setInterval(() => report(progress()), 200);
  report(progress());

  return {
    setRate(rate: number) {
      cfg.rate = rate;
    },
    async stop() {
      running = false;
      clearInterval(ticker);
      // Let in-flight messages be acknowledged (up to 5 s), then disconnect.
      const deadline = Date.now() + 5000;
      while (conns.some((c) => c.pending.size > 0 && !c.socket.destroyed) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      clearInterval(reporter);
      report(progress());
      for (const c of conns) c.socket.end(Buffer.from([0xe0, 0x00]));
    },
  };
}

// As a child process: config from argv[2], progress to the parent, stop on {type:'stop'}.
if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!) && process.argv[2]) {
  const cfg = JSON.parse(process.argv[2]) as LoadConfig;
  const send = (m: unknown) => {
    if (!process.send) console.log(JSON.stringify(m));
    else if (process.connected) process.send(m);
    else process.exit(0); // the parent is gone
  };
  const handle = await runLoad(cfg, send);
  send({ type: 'ready' });
  process.on('message', (m: { type: string; rate?: number }) => {
    if (m.type === 'rate') handle.setRate(m.rate!);
    if (m.type === 'stop') {
      void handle.stop().then(() => {
        send({ type: 'stopped' });
        setTimeout(() => process.exit(0), 100);
      });
    }
  });
}
