-- TimescaleDB's retention policy: each rollup pass forgets the rollups of the hours before the
-- policy's cut (now() - drop_after, sql/140_history_rollups_from_retention.sql), and reads take
-- those hours from their rows, which stay until the policy's job drops their chunk (on its own
-- schedule; a chunk that only partly expired stays until its end has). A restart with
-- HISTORY_RETENTION_DAYS raised, or unset, moved the cut back: reads took the hours between the
-- new and the old cut from rollups that were gone, and their rows, still stored and answered by
-- a read without `interval`, were left out of every aggregate, for good (found by an audit:
-- retention 3 days raised to 10, five rows of 3 to 6 days ago answered by `GET ...history` and
-- missing from `interval=1h&agg=sum,count`; test/history/rollup-retention-raised.test.ts).
-- Now setting the policy marks the hours of the rows between the new cut (or the oldest
-- chunk) and the old cut stale: reads take them from the rows at once, and the next rollup pass
-- computes them again. Everything else as in sql/170_history_retention_split_hour.sql.

CREATE OR REPLACE FUNCTION history_apply_retention(days integer, most integer DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  p record;
  dropped integer := 0;
  dropped_before timestamptz;
  cutoff timestamptz;
  step_end timestamptz;
  old_drop_after interval;
  old_cut timestamptz;
  first_kept timestamptz;
BEGIN
  -- One caller at a time, on every layout (several instances starting at once).
  PERFORM pg_advisory_xact_lock(7341002118);
  SELECT * INTO s FROM history_settings;
  IF s.timescale THEN
    -- TimescaleDB: a retention policy (community license) drops whole chunks in the
    -- background; on the Apache-only build, drop them here instead (returns how many).
    IF coalesce(current_setting('timescaledb.license', true), 'timescale') = 'timescale' THEN
      -- The rollup passes' lock: no pass forgets or computes hours while the cut moves.
      PERFORM pg_advisory_xact_lock(7341002120);
      EXECUTE 'SELECT (config->>''drop_after'')::interval FROM timescaledb_information.jobs
                WHERE proc_name = ''policy_retention'' AND hypertable_schema = current_schema() AND hypertable_name = ''history'''
        INTO old_drop_after;
      PERFORM remove_retention_policy('history', if_exists => true);
      IF days IS NOT NULL THEN
        PERFORM add_retention_policy('history', drop_after => days * interval '1 day');
      END IF;
      -- A longer retention, or none: the cut moves back. The passes forgot the rollups of the
      -- hours before the old cut (each pass: those before its own, earlier one), while the rows
      -- the policy's job has not dropped yet are still there; reads would now take those hours
      -- from rollups that are gone. Their hours are marked stale: reads take them from the rows,
      -- and the next pass computes them again.
      IF old_drop_after IS NOT NULL AND (days IS NULL OR days * interval '1 day' > old_drop_after) THEN
        first_kept := history_rollups_from();
        old_cut := date_bin(interval '1 hour', now() - old_drop_after, timestamptz 'epoch');
        IF first_kept IS NOT NULL AND first_kept < old_cut THEN
          INSERT INTO history_rollup_dirty (series, hour)
          SELECT DISTINCT series, date_bin(interval '1 hour', ts, timestamptz 'epoch')
            FROM history
           WHERE ts >= date_bin(interval '1 hour', first_kept, timestamptz 'epoch') AND ts < old_cut
              AND ts < (SELECT rolled_before FROM history_settings)
          ON CONFLICT DO NOTHING;
        END IF;
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
