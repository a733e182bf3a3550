-- Plain PostgreSQL: a partition is made as a table of its own and then attached, not with
-- CREATE TABLE ... PARTITION OF. The latter takes history's ACCESS EXCLUSIVE lock, so it waited
-- for every reader of history to finish (a streamed export holds its ACCESS SHARE lock for as
-- long as it streams), and every read and COPY of history that came after queued behind it:
-- ingest of a message whose time fell outside the prepared partitions stalled its shard, and
-- history reads waited, until the export ended (found by an audit: 16 s). ATTACH PARTITION
-- takes SHARE UPDATE EXCLUSIVE on history, which readers and writers do not conflict with; the
-- new table is empty, so attaching it scans nothing, and it gets history's index and row
-- triggers as PARTITION OF gave them.
CREATE OR REPLACE FUNCTION history_ensure_partition(at timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  secs double precision;
  start_ts timestamptz;
  end_ts timestamptz;
  part text;
BEGIN
  SELECT * INTO s FROM history_settings;
  IF s.timescale THEN
    RETURN;
  END IF;
  secs := extract(epoch FROM s.chunk_interval);
  start_ts := to_timestamp(floor(extract(epoch FROM at) / secs) * secs);
  end_ts := to_timestamp(floor(extract(epoch FROM at) / secs) * secs + secs);
  IF EXISTS (SELECT 1 FROM history_partitions WHERE range_start = start_ts) THEN
    RETURN;
  END IF;
  -- One creator at a time (transaction-scoped lock; the caller runs in autocommit).
  PERFORM pg_advisory_xact_lock(7341002118);
  IF EXISTS (SELECT 1 FROM history_partitions WHERE range_start = start_ts) THEN
    RETURN;
  END IF;
  part := 'history_' || to_char(start_ts AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MI');
  EXECUTE format('CREATE TABLE %I (LIKE history INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
  EXECUTE format('ALTER TABLE history ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, start_ts, end_ts);
  INSERT INTO history_partitions (name, range_start, range_end) VALUES (part, start_ts, end_ts);
END
$$;
