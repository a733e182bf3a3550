-- Retention on plain PostgreSQL dropped a partition and left the rollups of its hours to the next
-- rollup pass (history_rollup_forget_expired, sql/070_history_rollup.sql), which forgets only
-- hours before the oldest partition there is. A late row of an expired day arriving between the
-- drop and that pass (a device's backlog, a clock gone wrong) created the partition again, so
-- the dropped rows' rollups were neither forgotten nor skipped by reads, and were answered for
-- as long as the partition stayed (found by an audit: 2 rows rolled up, their partition dropped,
-- one late row of that day: count 3, sum 18 where the rows say 1 and 7). The rollups and marks of
-- the dropped partitions' hours now go in the transaction that drops them.
CREATE OR REPLACE FUNCTION history_apply_retention(days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  p record;
  dropped integer := 0;
  dropped_before timestamptz;
BEGIN
  SELECT * INTO s FROM history_settings;
  IF s.timescale THEN
    -- TimescaleDB: a retention policy (community license) drops whole chunks in the
    -- background; on the Apache-only build, drop them here instead.
    IF coalesce(current_setting('timescaledb.license', true), 'timescale') = 'timescale' THEN
      PERFORM remove_retention_policy('history', if_exists => true);
      IF days IS NOT NULL THEN
        PERFORM add_retention_policy('history', drop_after => days * interval '1 day');
      END IF;
    ELSIF days IS NOT NULL THEN
      PERFORM drop_chunks('history', older_than => now() - days * interval '1 day');
    END IF;
    RETURN 0;
  END IF;
  IF days IS NULL THEN
    RETURN 0;
  END IF;
  PERFORM pg_advisory_xact_lock(7341002118);
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
