// Just the part of async-exit-hook's API that src/db/embedded.ts uses.
declare module 'async-exit-hook' {
  interface ExitHook {
    unhookEvent(event: string): void;
    hookedEvents(): string[];
  }
  const hook: ExitHook;
  export default hook;
}
