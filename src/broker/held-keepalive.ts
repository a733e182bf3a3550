// While a device's QoS 1 publish waits for its commit, aedes reads nothing more from that
// connection (the embedded broker's backpressure: docs/messaging.md §3). The device's PINGREQs
// then wait unread, so two keepalive checks would close a connection whose device is not
// silent (it is the service that stopped listening): aedes's own (no packet read for 1.5 × the
// device's keepalive) and the device's (no PINGRESP within 1.5 × its keepalive, as mqtt.js
// does it). Measured before this: a 90 s database outage closed the connection of every device
// with a message waiting, each of which then sent its unacknowledged messages again (stored
// twice). So while a client has a publish waiting, aedes's check of it is held back, and every
// half keepalive the client is sent a PINGRESP: "the server is alive" (MQTT 3.1.1 §3.13), which
// is true; its unread PINGREQs are answered again once reading resumes.
import type { Client } from 'aedes';

/** Below the shortest keepalive check aedes runs (1 s × 1.5). */
const TICK_MS = 500;
const PINGRESP = Buffer.from([0xd0, 0x00]);

/** aedes's per-client keepalive state: not part of its typed API. */
interface KeepaliveState {
  _keepaliveTimer?: NodeJS.Timeout | null;
  /** 1.5 × the client's keepalive in ms, + 1; -1 without keepalive. */
  _keepaliveInterval?: number;
}

interface Waiting {
  publishes: number;
  /** When the client is next sent a PINGRESP (ms). */
  pingAt: number;
}

export class HeldKeepalives {
  private readonly waiting = new Map<Client, Waiting>();
  private timer: NodeJS.Timeout | undefined;

  /** A publish of `client` waits; the returned function is called once it no longer does. */
  hold(client: Client): () => void {
    const w = this.waiting.get(client);
    if (w) w.publishes++;
    else this.waiting.set(client, { publishes: 1, pingAt: Date.now() + halfKeepalive(client) });
    this.timer ??= setInterval(() => this.tick(), TICK_MS);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const entry = this.waiting.get(client);
      if (entry && --entry.publishes > 0) return;
      this.forget(client);
    };
  }

  /** The client is gone, or has nothing waiting. */
  forget(client: Client): void {
    this.waiting.delete(client);
    if (this.waiting.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  private tick(): void {
    const now = Date.now();
    for (const [client, w] of this.waiting) {
      const state = client as unknown as KeepaliveState;
      if (!state._keepaliveTimer) continue; // keepalive 0: no check on either side
      state._keepaliveTimer.refresh();
      if (now >= w.pingAt && !client.conn.destroyed) {
        client.conn.write(PINGRESP);
        w.pingAt = now + halfKeepalive(client);
      }
    }
  }
}

/** Half the client's keepalive in ms (from aedes's check interval). */
function halfKeepalive(client: Client): number {
  const interval = (client as unknown as KeepaliveState)._keepaliveInterval ?? -1;
  return interval > 0 ? (interval - 1) / 3 : Infinity;
}
