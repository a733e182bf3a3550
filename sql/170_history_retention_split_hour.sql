-- Retention forgot the rollups of every hour starting before the end of the last dropped chunk
-- (hour < dropped_before), and each rollup pass those before the oldest chunk (hour <
-- first_kept). With a chunk interval that does not end on whole hours (HISTORY_CHUNK_INTERVAL
-- of 45 or 90 minutes), the hour that end falls in still has rows, in the next chunk: its
-- rollup went, unmarked. While that chunk was the oldest, reads took the hour from its rows; but
-- a late row of an expired day (a device's backlog) makes an older chunk again until the next
-- maintenance pass, reads then take rollups from there on, and the split hour answered no
-- rows at all (found by an audit: one row left of the hour, `GET ...?interval=1h` left the hour
-- out while the same range without interval answered its row; test/history/rollup-chunk-edges.test.ts).
-- Now only hours that end by the cut are forgotten; where retention drops chunks, the hour it
-- splits is marked stale, so reads take it from the rows left and the next pass computes it
-- again (once: the rollup pass's own cleanup, at the oldest chunk's start or TimescaleDB's
-- policy cut, marks nothing, since no rows were dropped there that the drop did not mark, and
-- reads never take a rollup before TimescaleDB's cut). Everything else as in
-- sql/160_history_retention_in_steps.sql and sql/140_history_rollups_from_retention.sql.

-- The rollups and marks of the hours before `cut` forgotten: those ending by it go; with
-- `split_stale`, the hour `cut` falls inside (if any) is marked for every series it has a
-- rollup of (its rows before `cut` were dropped).
CREATE FUNCTION history_rollup_forget_before(cut timestamptz, split_stale boolean) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  split timestamptz;
  n bigint;
BEGIN
  IF cut IS NULL OR NOT isfinite(cut) THEN
    IF cut = 'infinity' THEN
      DELETE FROM history_rollup;
      GET DIAGNOSTICS n = ROW_COUNT;
      DELETE FROM history_rollup_dirty;
      RETURN n;
    END IF;
    RETURN 0;
  END IF;
  split := date_bin(interval '1 hour', cut, timestamptz 'epoch');
  IF split_stale AND split < cut THEN
    INSERT INTO history_rollup_dirty (series, hour)
    SELECT DISTINCT series, hour FROM history_rollup WHERE hour = split
    ON CONFLICT DO NOTHING;
  END IF;
  DELETE FROM history_rollup WHERE hour < split;
  GET DIAGNOSTICS n = ROW_COUNT;
  DELETE FROM history_rollup_dirty WHERE hour < split;
  RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION history_rollup_forget_expired() RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  RETURN history_rollup_forget_before(coalesce(history_rollups_from(), 'infinity'), false);
END
$$;

CREATE OR REPLACE FUNCTION history_apply_retention(days integer, most integer DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  p record;
  dropped integer := 0;
  dropped_before timestamptz;
  cutoff timestamptz;
  step_end timestamptz;
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
      IF most IS NOT NULL THEN
        -- At most `most` chunks, the oldest first: up to the end of the most-th oldest expired one
        -- (none found: fewer have expired, all of them go).
        EXECUTE 'SELECT range_end FROM timescaledb_information.chunks
                  WHERE hypertable_schema = current_schema() AND hypertable_name = ''history'' AND range_end <= $1
                  ORDER BY range_end LIMIT 1 OFFSET $2'
          INTO step_end USING cutoff, greatest(most, 1) - 1;
        cutoff := coalesce(step_end, cutoff);
      END IF;
      EXECUTE 'SELECT max(range_end) FROM timescaledb_information.chunks
                WHERE hypertable_schema = current_schema() AND hypertable_name = ''history'' AND range_end <= $1'
        INTO dropped_before USING cutoff;
      SELECT count(*) INTO dropped FROM drop_chunks('history', older_than => cutoff);
      IF dropped_before IS NOT NULL THEN
        PERFORM history_rollup_forget_before(dropped_before, true);
      END IF;
      RETURN dropped;
    END IF;
    RETURN 0;
  END IF;
  IF days IS NULL THEN
    RETURN 0;
  END IF;
  FOR p IN SELECT name, range_end FROM history_partitions WHERE range_end <= now() - days * interval '1 day'
            ORDER BY range_start LIMIT most LOOP
    EXECUTE format('DROP TABLE IF EXISTS %I', p.name);
    DELETE FROM history_partitions WHERE name = p.name;
    dropped := dropped + 1;
    dropped_before := p.range_end;
  END LOOP;
  -- The oldest partitions go first: every partition ending by dropped_before is gone, and so
  -- are the rows of every hour ending by it (the hour it splits keeps the rows after it).
  IF dropped_before IS NOT NULL THEN
    PERFORM history_rollup_forget_before(dropped_before, true);
  END IF;
  RETURN dropped;
END
$$;
