// The embedded broker's logins, asked of the main thread: it holds the credential key and the
// credential cache (src/registry/credentials/logins.ts), so no secret is kept in this thread.
// One message each way per login; the password crosses once, in memory.
import type { DeviceLogin, LoginCheck, LoginVerdict } from '../registry/credentials/logins.js';
import type { RouterToMain } from './protocol.js';

/** A login the main thread has not answered in this time is refused as "server unavailable". */
const ANSWER_MS = 30_000;

export class LoginBridge implements LoginCheck {
  private readonly waiting = new Map<number, { resolve(v: LoginVerdict): void; reject(err: Error): void; timer: NodeJS.Timeout }>();
  private next = 1;

  constructor(private readonly post: (m: RouterToMain) => void) {}

  check(login: DeviceLogin): Promise<LoginVerdict> {
    const requestId = this.next++;
    return new Promise<LoginVerdict>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(requestId);
        reject(new Error('the registry did not answer a login in time'));
      }, ANSWER_MS);
      timer.unref();
      this.waiting.set(requestId, { resolve, reject, timer });
      this.post({ type: 'login', requestId, login });
    });
  }

  answer(requestId: number, verdict: LoginVerdict | undefined, error: string | undefined): void {
    const w = this.waiting.get(requestId);
    if (!w) return;
    this.waiting.delete(requestId);
    clearTimeout(w.timer);
    if (verdict) w.resolve(verdict);
    else w.reject(new Error(error ?? 'the login could not be checked'));
  }
}
