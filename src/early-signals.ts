// Imported first by main.ts, so that its handlers are installed before the other modules load
// (about a second): a SIGINT/SIGTERM meanwhile is held, rather than killing the process with code
// 143, and handed to main.ts's handler once it is set, which cancels the start and exits 0.
export const earlySignals: { received?: string; handler?: (signal: string) => void } = {};

for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => {
    if (earlySignals.handler) earlySignals.handler(signal);
    else earlySignals.received ??= signal;
  });
