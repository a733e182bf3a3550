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
