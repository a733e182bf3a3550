-- TimescaleDB's Apache-only build has no retention policy: there the service drops expired
-- chunks itself (docs/messaging.md §5). It did so only at start (history_apply_retention was
-- called by the periodic maintenance on plain PostgreSQL only), so a service that kept running
-- kept every row however old (found by an audit: HISTORY_RETENTION_DAYS=3, rows of ten days
-- ago arriving after the start stayed through every maintenance pass). The maintenance now
-- calls history_apply_retention at every pass wherever the service drops (plain PostgreSQL and
-- the Apache-only build; history_retention_by_service() says which), and on the Apache-only
-- build the dropped chunks' rollups and marks go in the transaction that drops them, as the
-- partitions' do on plain PostgreSQL (sql/110_history_retention_forgets_rollups.sql).

-- Whether HISTORY_RETENTION_DAYS is applied by the service's maintenance (true: plain
-- PostgreSQL, and TimescaleDB without the community license) rather than by a TimescaleDB
-- retention policy set once at start.
CREATE FUNCTION history_retention_by_service() RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT NOT timescale OR coalesce(current_setting('timescaledb.license', true), 'timescale') <> 'timescale'
    FROM history_settings
$$;

CREATE OR REPLACE FUNCTION history_apply_retention(days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  p record;
  dropped integer := 0;
  dropped_before timestamptz;
  cutoff timestamptz;
BEGIN
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
