// The reasons a device login is refused, counted by reason in device_logins_refused_total.
export type LoginRefusal = 'unknown_device' | 'no_credential' | 'wrong' | 'expired' | 'throttled';
export const LOGIN_REFUSALS: readonly LoginRefusal[] = ['unknown_device', 'no_credential', 'wrong', 'expired', 'throttled'];
