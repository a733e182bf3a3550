// The reasons a device login is refused: the one list the code, the metric
// device_logins_refused_total{reason} and its help text are made from.

/** Each reason, with what its help text says after the name when the name alone would mislead. */
const REFUSALS = {
  unknown_device: undefined,
  no_credential: 'none presented, or the device has none',
  wrong: undefined,
  expired: undefined,
  throttled: 'too many failures waiting',
} as const satisfies Record<string, string | undefined>;

export type LoginRefusal = keyof typeof REFUSALS;

export const LOGIN_REFUSALS = Object.keys(REFUSALS) as LoginRefusal[];

/** The reasons as the metric's help text lists them. */
export function loginRefusalsHelp(): string {
  return LOGIN_REFUSALS.map((r) => {
    const note: string | undefined = REFUSALS[r];
    return note ? `${r} (${note})` : r;
  }).join(', ');
}
