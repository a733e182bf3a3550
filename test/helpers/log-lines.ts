// Reading a spawned service's output as log lines (docs: one JSON object a line).
import { expect } from 'vitest';

const LEVELS = ['debug', 'info', 'warn', 'error'];

/** Each output line parsed; a line that is not one JSON object with ts, level and msg fails the test. */
export function parseLogLines(output: string[]): Array<Record<string, unknown>> {
  const lines = output.filter((l) => l !== '');
  expect(lines.length).toBeGreaterThan(0);
  return lines.map((line) => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      throw new Error(`not a JSON line: ${line}`);
    }
    expect(typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed), line).toBe(true);
    const entry = parsed as Record<string, unknown>;
    expect(typeof entry.ts, line).toBe('string');
    expect(entry.ts as string, line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/);
    expect(Number.isNaN(Date.parse(entry.ts as string)), line).toBe(false);
    expect(LEVELS, line).toContain(entry.level);
    expect(typeof entry.msg, line).toBe('string');
    expect((entry.msg as string).length, line).toBeGreaterThan(0);
    return entry;
  });
}
