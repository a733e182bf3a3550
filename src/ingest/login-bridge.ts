// The embedded broker's logins, asked of the main thread: it holds the credential key and the
// credential cache (src/registry/credentials/logins.ts), so no secret is kept in this thread.
// One message each way per login; the password crosses once, in memory.
import type { AcceptedLogin, DeviceLogin, LoginCheck, LoginStanding, LoginVerdict } from '../registry/credentials/logins.js';
import type { DeviceRef } from '../topics.js';
import type { RouterToMain } from './protocol.js';

/** A question the main thread has not answered in this time fails (a login is refused as "server unavailable"). */
const ANSWER_MS = 30_000;

interface Waiting {
  resolve(answer: unknown): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

export class LoginBridge implements LoginCheck {
  private readonly waiting = new Map<number, Waiting>();
  private next = 1;

  constructor(private readonly post: (m: RouterToMain) => void) {}

  check(login: DeviceLogin): Promise<LoginVerdict> {
    return this.ask((requestId) => ({ type: 'login', requestId, login }));
  }

  standing(logins: AcceptedLogin[]): Promise<LoginStanding[]> {
    return this.ask((requestId) => ({ type: 'standing', requestId, logins }));
  }

  settle(device: DeviceRef, certificate: boolean, outcome: LoginVerdict): void {
    this.post({ type: 'login-settled', device, certificate, outcome });
  }

  /** The main thread's answer to question `requestId` (`undefined`: it could not answer, `error` says why). */
  answer(requestId: number, answer: LoginVerdict | LoginStanding[] | undefined, error: string | undefined): void {
    const w = this.waiting.get(requestId);
    if (!w) return;
    this.waiting.delete(requestId);
    clearTimeout(w.timer);
    if (answer !== undefined) w.resolve(answer);
    else w.reject(new Error(error ?? 'the registry could not answer'));
  }

  private ask<T>(question: (requestId: number) => RouterToMain): Promise<T> {
    const requestId = this.next++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(requestId);
        reject(new Error('the registry did not answer in time'));
      }, ANSWER_MS);
      timer.unref();
      this.waiting.set(requestId, { resolve, reject, timer });
      this.post(question(requestId));
    });
  }
}
