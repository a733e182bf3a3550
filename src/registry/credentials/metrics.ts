// Device login metrics: every login a broker asked about, accepted (by what the device
// presented) or refused (by reason).
import client from 'prom-client';
import type { Metrics } from '../../metrics.js';
import { LOGIN_REFUSALS, loginRefusalsHelp, type LoginRefusal } from './refusals.js';

export type LoginKind = 'password' | 'certificate' | 'none';

export class LoginMetrics {
  private readonly acceptedTotal: client.Counter<'credential'>;
  private readonly refusedTotal: client.Counter<'reason'>;

  constructor(metrics: Metrics) {
    const registers = [metrics.registry];
    this.acceptedTotal = new client.Counter({
      name: 'device_logins_accepted_total',
      help: 'Device logins to a broker accepted, by what the device presented (password, certificate, none: no credential asked for)',
      labelNames: ['credential'] as const,
      registers,
    });
    this.refusedTotal = new client.Counter({
      name: 'device_logins_refused_total',
      help: `Device logins to a broker refused, by reason: ${loginRefusalsHelp()}`,
      labelNames: ['reason'] as const,
      registers,
    });
    for (const r of LOGIN_REFUSALS) this.refusedTotal.labels(r).inc(0);
    for (const k of ['password', 'certificate', 'none'] as const) this.acceptedTotal.labels(k).inc(0);
  }

  accepted(kind: LoginKind): void {
    this.acceptedTotal.labels(kind).inc();
  }

  refused(reason: LoginRefusal): void {
    this.refusedTotal.labels(reason).inc();
  }
}
