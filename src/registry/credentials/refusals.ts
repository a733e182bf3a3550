// The reasons a device login is refused, counted by reason in device_logins_refused_total.
export const LOGIN_REFUSALS = ['unknown_device', 'no_credential', 'wrong', 'expired', 'throttled'] as const;
export type LoginRefusal = (typeof LOGIN_REFUSALS)[number];
