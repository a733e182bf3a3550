// Why ingest drops a message or a value (docs/messaging.md "Validation and conversion"): the one
// list the code, the metric `ingest_dropped_total{reason}` and its help text are made from.
// Every drop is acknowledged to the broker: a dropped message will never be stored.

interface DropReasonInfo {
  /** What one count is: a whole message, or one value (key) of a message. */
  counts: 'message' | 'value';
  /** Said in the metric's help text after the name, when the name alone would mislead. */
  note?: string;
}

const DROP_REASONS = {
  oversized: { counts: 'message' },
  bad_topic: { counts: 'message' },
  unknown_device: { counts: 'message' },
  not_json: { counts: 'message' },
  not_object: { counts: 'message' },
  translation_failed: { counts: 'message' },
  unprocessable: { counts: 'message' },
  overload: { counts: 'message', note: 'a QoS 0 message while INGEST_MAX_PENDING messages wait for their commit' },
  unknown_key: { counts: 'value' },
  wrong_type: { counts: 'value' },
  db_rejected: { counts: 'value' },
  bad_timestamp: { counts: 'value', note: 'an unreadable timestamp key, the values keep the receive time' },
} as const satisfies Record<string, DropReasonInfo>;

export type DropReason = keyof typeof DROP_REASONS;

export const DROP_REASON_NAMES = Object.keys(DROP_REASONS) as DropReason[];

/** The reasons whose one count is a whole message, or one value (the alert rule IngestDropsRising compares them with messages and values received). */
export function dropReasonsCounting(counts: DropReasonInfo['counts']): DropReason[] {
  return DROP_REASON_NAMES.filter((r) => DROP_REASONS[r].counts === counts);
}

/** The help text of `ingest_dropped_total`: every reason, grouped by what it counts. */
export function dropReasonsHelp(): string {
  const names = (counts: DropReasonInfo['counts']) =>
    dropReasonsCounting(counts)
      .map((r) => {
        const info: DropReasonInfo = DROP_REASONS[r];
        return info.note ? `${r}: ${info.note}` : r;
      })
      .join(', ');
  return `Dropped messages (${names('message')}) and values (${names('value')}), by reason`;
}
