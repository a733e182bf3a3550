// docs/live.md §2, "End of a stream": when the service stops, a WebSocket closes with code 1001
// `server shutting down` and a Server-Sent Events stream ends with a `closed` event of that
// reason. Before (found by an audit) only the page's test saw the WebSocket's 1001, through the
// page's text, and nothing read the SSE `closed` event of a shutdown.
import { afterAll, describe, expect, it } from 'vitest';
import { loggedAddress, login, spawnService, testEnv, type SpawnedService } from '../helpers/service.js';
import { openSse, openWs } from './stream-client.js';

const spawned: SpawnedService[] = [];
afterAll(() => {
  for (const s of spawned) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
});

describe('the service stops', () => {
  it('ends every stream with its reason: WebSocket 1001, SSE a closed event', async () => {
    const svc = spawnService(await testEnv({ LOG_LEVEL: 'info' }));
    spawned.push(svc);
    await svc.waitFor(/"msg":"ready"/, 60_000);
    const base = loggedAddress(await svc.waitFor(/public HTTP API listening/));
    const token = await login(base);
    const ws = await openWs(`${base.replace('http', 'ws')}/stream`, { token });
    const sse = await openSse(`${base}/stream`, token);
    await ws.next((m) => m.type === 'subscribed', 'subscribed (WebSocket)');
    await sse.next((m) => m.type === 'subscribed', 'subscribed (SSE)');

    svc.child.kill('SIGTERM');
    expect(await ws.closed).toEqual({ code: 1001, reason: 'server shutting down' });
    await sse.ended;
    expect(sse.events).toEqual([{ event: 'closed', data: { type: 'closed', reason: 'server shutting down' } }]);
    expect(await svc.exited).toBe(0);
  }, 90_000);
});
