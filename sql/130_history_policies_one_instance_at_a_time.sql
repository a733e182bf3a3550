-- "Starting several instances at once is safe" (docs/operations.md §7): on TimescaleDB it was
-- not. Each start sets the retention policy (history_apply_retention: remove, then add) and, with
-- a changed HISTORY_CHUNK_INTERVAL, the chunk interval and the compression policy
-- (history_set_chunk_interval, history_compress_after), and two instances doing so at once made
-- one start fail with "tuple concurrently updated" or "tuple concurrently deleted" (found by an
-- audit: four instances started together with HISTORY_RETENTION_DAYS set). Plain PostgreSQL's
-- retention already took the partitions' advisory lock; the TimescaleDB branches now take it
-- first too, so the instances change the policies one after the other (each seeing the
-- previous one's).

CREATE OR REPLACE FUNCTION history_apply_retention(days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  p record;
  dropped integer := 0;
  dropped_before timestamptz;
  cutoff timestamptz;
BEGIN
  -- One caller at a time, on every layout (several instances starting at once).
  PERFORM pg_advisory_xact_lock(7341002118);
  SELECT * INTO s FROM history_settings;
  IF s.timescale THEN
    -- TimescaleDB: a retention policy (community license) drops whole chunks in the
    -- background; on the Apache-only build, drop them here instead (returns how many).
    IF coalesce(current_setting('timescaledb.license', true), 'timescale') = 'timescale' THEN
      PERFORM remove_retention_policy('history', if_exists => true);
      IF days IS NOT NULL THEN
        PERFORM add_retention_policy('history', drop_after => days * interval '1 day');
      END IF;
    ELSIF days IS NOT NULL THEN
      cutoff := now() - days * interval '1 day';
      EXECUTE 'SELECT max(range_end) FROM timescaledb_information.chunks
                WHERE hypertable_schema = current_schema() AND hypertable_name = ''history'' AND range_end <= $1'
        INTO dropped_before USING cutoff;
      SELECT count(*) INTO dropped FROM drop_chunks('history', older_than => cutoff);
      IF dropped_before IS NOT NULL THEN
        DELETE FROM history_rollup WHERE hour < dropped_before;
        DELETE FROM history_rollup_dirty WHERE hour < dropped_before;
      END IF;
      RETURN dropped;
    END IF;
    RETURN 0;
  END IF;
  IF days IS NULL THEN
    RETURN 0;
  END IF;
  FOR p IN SELECT name, range_end FROM history_partitions WHERE range_end <= now() - days * interval '1 day' ORDER BY range_start LOOP
    EXECUTE format('DROP TABLE IF EXISTS %I', p.name);
    DELETE FROM history_partitions WHERE name = p.name;
    dropped := dropped + 1;
    dropped_before := p.range_end;
  END LOOP;
  -- Every partition ending by dropped_before is gone: so are the rows of every hour before it.
  IF dropped_before IS NOT NULL THEN
    DELETE FROM history_rollup WHERE hour < dropped_before;
    DELETE FROM history_rollup_dirty WHERE hour < dropped_before;
  END IF;
  RETURN dropped;
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
    -- TimescaleDB; one instance at a time, the settings read again under the lock.
    PERFORM pg_advisory_xact_lock(7341002118);
    SELECT * INTO s FROM history_settings;
    IF s.chunk_interval = chunk THEN
      RETURN true;
    END IF;
    PERFORM set_chunk_time_interval('history', chunk);
    UPDATE history_settings SET chunk_interval = chunk;
    PERFORM history_compress_after(chunk);
    RETURN true;
  END IF;
  RETURN false;
END
$$;
