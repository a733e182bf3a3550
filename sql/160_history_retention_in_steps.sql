-- Plain PostgreSQL's retention dropped every expired partition in one transaction. Dropping one
-- locks it, its index and its TOAST table and index until the transaction ends (~8 entries of
-- the lock table, which holds max_locks_per_transaction x max_connections, 6,400 with
-- PostgreSQL's defaults, shared by every session): with more expired partitions than that
-- allows it failed with "out of shared memory", at start (the service did not start) and at
-- every pass, so nothing expired was dropped again (found by an audit: 2,362 expired daily
-- partitions, a device's backlog of old readings, HISTORY_RETENTION_DAYS=3). It now drops at
-- most `most` partitions a call (NULL, the default: all, as before, for a call by hand), the
-- oldest first, and returns how many it dropped; the service passes 50 and calls it again,
-- each call its own transaction, until fewer come back. Holding history's exclusive lock a few
-- dozen drops long, not thousands, also keeps the reads and COPYs queued behind it waiting for
-- less. TimescaleDB's Apache-only build (drop_chunks here) drops in the same steps; with the
-- community license a retention policy drops, as before.
DROP FUNCTION history_apply_retention(integer);

CREATE FUNCTION history_apply_retention(days integer, most integer DEFAULT NULL) RETURNS integer
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
  FOR p IN SELECT name, range_end FROM history_partitions WHERE range_end <= now() - days * interval '1 day'
            ORDER BY range_start LIMIT most LOOP
    EXECUTE format('DROP TABLE IF EXISTS %I', p.name);
    DELETE FROM history_partitions WHERE name = p.name;
    dropped := dropped + 1;
    dropped_before := p.range_end;
  END LOOP;
  -- The oldest partitions go first: every partition ending by dropped_before is gone, and so
  -- are the rows of every hour before it.
  IF dropped_before IS NOT NULL THEN
    DELETE FROM history_rollup WHERE hour < dropped_before;
    DELETE FROM history_rollup_dirty WHERE hour < dropped_before;
  END IF;
  RETURN dropped;
END
$$;
