-- TimescaleDB compresses chunks "older than two intervals" (docs/messaging.md §5): the policy
-- was added once, by 020_history.sql, with twice the interval the table was created with, and a
-- changed HISTORY_CHUNK_INTERVAL left it as it was (found by an audit: 1 day changed to 1 hour,
-- chunks were still compressed after 2 days; raised to 1 week, the open region's previous chunk
-- would be compressed while still written). history_set_chunk_interval now sets the policy's
-- age with the interval; a database whose interval was changed before gets it here. A policy
-- the operator removed stays removed; plain PostgreSQL has none.
CREATE FUNCTION history_compress_after(chunk interval) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT (SELECT timescale FROM history_settings)
     OR coalesce(current_setting('timescaledb.license', true), 'timescale') <> 'timescale' THEN
    RETURN;
  END IF;
  -- TimescaleDB
  IF NOT EXISTS (SELECT 1 FROM timescaledb_information.jobs
                  WHERE proc_name = 'policy_compression' AND hypertable_schema = current_schema()
                    AND hypertable_name = 'history') THEN
    RETURN;
  END IF;
  PERFORM remove_compression_policy('history', if_exists => true);
  PERFORM add_compression_policy('history', compress_after => chunk * 2);
END
$$;

CREATE OR REPLACE FUNCTION history_set_chunk_interval(chunk interval) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
BEGIN
  SELECT * INTO s FROM history_settings;
  IF s.chunk_interval = chunk THEN
    RETURN true;
  END IF;
  IF s.timescale THEN
    -- TimescaleDB
    PERFORM set_chunk_time_interval('history', chunk);
    UPDATE history_settings SET chunk_interval = chunk;
    PERFORM history_compress_after(chunk);
    RETURN true;
  END IF;
  RETURN false;
END
$$;

DO $$
BEGIN
  IF (SELECT timescale FROM history_settings)
     AND coalesce(current_setting('timescaledb.license', true), 'timescale') = 'timescale' THEN
    -- TimescaleDB
    IF EXISTS (SELECT 1 FROM timescaledb_information.jobs
                WHERE proc_name = 'policy_compression' AND hypertable_schema = current_schema()
                  AND hypertable_name = 'history'
                  AND (config->>'compress_after')::interval <> (SELECT chunk_interval * 2 FROM history_settings)) THEN
      PERFORM history_compress_after((SELECT chunk_interval FROM history_settings));
    END IF;
  END IF;
END
$$;
