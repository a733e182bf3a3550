-- TimescaleDB's retention policy drops chunks on its own schedule, outside the service, and the
-- rollups of their hours were forgotten, and skipped by reads, only before the oldest chunk
-- there is. A late row of an expired day arriving between the policy's job and the next
-- rollup pass made that day's chunk again, the oldest one now, so the dropped rows' rollups
-- were neither forgotten nor skipped, and that day's aggregates counted rows that were gone
-- until the policy dropped the chunk again (found by audits: the plain layout's case, fixed in
-- the dropping transaction by sql/110_history_retention_forgets_rollups.sql, cannot be fixed
-- so here, since the policy's job is TimescaleDB's). No rollup of an hour before the policy's
-- cut (now() - drop_after: every chunk it dropped ended by then) is used or kept: those hours
-- are read from their rows, which are what is left of them.

-- From where the rollups may answer (NULL: nowhere, there is no chunk): the oldest chunk's
-- start and, on TimescaleDB with a retention policy, not before the policy's cut.
CREATE FUNCTION history_rollups_from() RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
  oldest timestamptz := history_oldest_chunk_start();
  drop_after interval;
BEGIN
  IF oldest IS NULL OR NOT (SELECT timescale FROM history_settings) THEN
    RETURN oldest;
  END IF;
  EXECUTE 'SELECT (config->>''drop_after'')::interval FROM timescaledb_information.jobs
            WHERE proc_name = ''policy_retention'' AND hypertable_schema = current_schema() AND hypertable_name = ''history'''
    INTO drop_after;
  RETURN greatest(oldest, now() - drop_after);
END
$$;

CREATE OR REPLACE FUNCTION history_rollup_forget_expired() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  first_kept timestamptz;
  n bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  first_kept := history_rollups_from();
  DELETE FROM history_rollup WHERE hour < coalesce(first_kept, 'infinity');
  GET DIAGNOSTICS n = ROW_COUNT;
  DELETE FROM history_rollup_dirty WHERE hour < coalesce(first_kept, 'infinity');
  RETURN n;
END
$$;
