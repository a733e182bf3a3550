-- Where the history's oldest chunk starts (NULL: none), on either layout. A read walking a
-- series' closed region starts there at the earliest (src/history/repo.ts): a span is never
-- narrowed when retention drops the oldest chunks, and a walk from the span's start through
-- the dropped range would otherwise plan, window after window, chunks that hold nothing of it.
CREATE FUNCTION history_oldest_chunk_start() RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
  oldest timestamptz;
BEGIN
  IF (SELECT timescale FROM history_settings) THEN
    -- TimescaleDB (compressed chunks included)
    EXECUTE 'SELECT min(range_start) FROM timescaledb_information.chunks
              WHERE hypertable_schema = current_schema() AND hypertable_name = ''history''' INTO oldest;
  ELSE
    SELECT min(range_start) INTO oldest FROM history_partitions;
  END IF;
  RETURN oldest;
END
$$;

-- The rollups' own cleanup asks the same question: one place for it.
CREATE OR REPLACE FUNCTION history_rollup_forget_expired() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  first_kept timestamptz;
  n bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  first_kept := history_oldest_chunk_start();
  DELETE FROM history_rollup WHERE hour < coalesce(first_kept, 'infinity');
  GET DIAGNOSTICS n = ROW_COUNT;
  DELETE FROM history_rollup_dirty WHERE hour < coalesce(first_kept, 'infinity');
  RETURN n;
END
$$;
