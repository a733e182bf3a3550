// The device fleet of the connect-storm benchmark (bench/connect-storm.ts), a process of its
// own: raw TCP sockets with pre-encoded MQTT 3.1.1 CONNECT packets (username `<tenant>:<id>`,
// password the device's secret), every connection opened at once; the time of each CONNACK is
// recorded. mqtt.js clients would cost the generator more than the broker; these do not.
// Driven over IPC: {type: 'config', config} first (10,000 secrets are too long for argv), then
// {type: 'storm'} -> {type: 'result', ...}; {type: 'close'} -> {type: 'closed'}.
import net from 'node:net';
import mqttPacket from 'mqtt-packet';

export interface FleetConfig {
  url: string;
  tenant: string;
  devices: Array<{ id: string; secret: string | undefined }>;
}

export interface StormResult {
  type: 'result';
  connected: number;
  refused: number;
  failed: number;
  /** From the first connection opened to the last CONNACK (ms). */
  allMs: number;
  p50Ms: number;
  p99Ms: number;
}

let url: URL;
let port: number;
let connects: Buffer[] = [];

function configure(cfg: FleetConfig): void {
  url = new URL(cfg.url);
  port = Number(url.port || 1883);
  connects = cfg.devices.map((d) =>
    mqttPacket.generate({
      cmd: 'connect',
      protocolId: 'MQTT',
      protocolVersion: 4,
      clientId: `storm-${d.id}`,
      clean: true,
      keepalive: 0,
      username: `${cfg.tenant}:${d.id}`,
      ...(d.secret !== undefined ? { password: Buffer.from(d.secret) } : {}),
    }),
  );
}
let sockets: net.Socket[] = [];

function storm(): Promise<StormResult> {
  return new Promise((resolve) => {
    const started = performance.now();
    const times: number[] = [];
    let refused = 0;
    let failed = 0;
    let done = 0;
    const finish = () => {
      if (++done < connects.length) return;
      times.sort((a, b) => a - b);
      const at = (q: number) => Math.round(times[Math.min(times.length - 1, Math.floor(q * times.length))] ?? 0);
      resolve({
        type: 'result',
        connected: times.length,
        refused,
        failed,
        allMs: Math.round(Math.max(0, ...times)),
        p50Ms: at(0.5),
        p99Ms: at(0.99),
      });
    };
    sockets = connects.map((packet) => {
      const socket = net.connect({ host: url.hostname, port });
      let answered = false;
      socket.setNoDelay(true);
      socket.on('connect', () => socket.write(packet));
      socket.on('data', (chunk: Buffer) => {
        // CONNACK: 0x20 0x02 <flags> <return code>.
        if (answered || chunk.length < 4) return;
        answered = true;
        if (chunk[0] === 0x20 && chunk[3] === 0) times.push(performance.now() - started);
        else refused++;
        finish();
      });
      socket.on('error', () => undefined);
      socket.on('close', () => {
        if (answered) return;
        answered = true;
        failed++;
        finish();
      });
      return socket;
    });
  });
}

process.on('message', (m: { type: string; config?: FleetConfig }) => {
  if (m.type === 'config') {
    configure(m.config!);
    process.send!({ type: 'configured' });
  }
  if (m.type === 'storm') void storm().then((r) => process.send!(r));
  if (m.type === 'close') {
    // Refused connections are closed already.
    const live = sockets.filter((s) => !s.destroyed);
    let open = live.length;
    if (open === 0) process.send!({ type: 'closed' });
    for (const s of live) {
      s.once('close', () => {
        if (--open === 0) process.send!({ type: 'closed' });
      });
      // DISCONNECT, then close.
      s.end(Buffer.from([0xe0, 0x00]));
    }
    sockets = [];
  }
});
process.send!({ type: 'ready' });
