-- Reads that stay as fast with a year of chunks as with four (docs/messaging.md §6, "How a
-- read finds its chunks"). A query with a constant bound on `ts` is planned with only the
-- chunks (partitions) of its range, on both layouts; without one, PostgreSQL and TimescaleDB
-- plan every chunk, ~0.1 ms each. So the history is split at one moving time, `closed_before`:
--   * rows at or after it (the open region: the previous and current chunk, and any future
--     one) are read with `ts >= <closed_before>` written into the statement as a literal, so
--     the prepared statement's plan holds those few chunks only and is reused until the
--     boundary moves (once a chunk interval);
--   * rows before it (the closed region) are covered by history_series_span: for every such
--     row there is a span of its series with first_ts <= ts <= last_ts. A read that needs
--     closed rows walks windows of constant bounds inside the series' span, each planned with
--     the chunks of its window only.
-- The service moves the boundary forward in two steps (src/history/maintenance.ts):
--   1. history_note_before(t): from now on, a row inserted with ts < t widens its series'
--      span (trigger below, which fires only for such late rows: ingest pays one comparison
--      per row). Recreating the trigger waits for the writes under way to commit.
--   2. history_close_before(t): spans from the rows in [closed_before, t), then
--      closed_before = t. Rows written meanwhile were noted by the trigger (step 1 first).
-- A span is a bound, never less: rows deleted by hand or dropped by retention leave it wider
-- than the data, which only costs a read a few empty windows. History rows are insert-only.
-- Every TimescaleDB-specific statement of this file is marked "TimescaleDB".

ALTER TABLE history_settings
  ADD COLUMN closed_before timestamptz NOT NULL DEFAULT '-infinity',
  ADD COLUMN noted_before  timestamptz NOT NULL DEFAULT '-infinity',
  ADD CONSTRAINT history_settings_noted_first CHECK (noted_before >= closed_before);

CREATE TABLE history_series_span (
  series   bigint      PRIMARY KEY,
  first_ts timestamptz NOT NULL,
  last_ts  timestamptz NOT NULL
);

-- Widens the span of a row's series to the row's time. Fired only for rows older than
-- noted_before (the trigger's WHEN), i.e. rows arriving late into the closed region.
CREATE FUNCTION history_note_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO history_series_span AS s (series, first_ts, last_ts) VALUES (NEW.series, NEW.ts, NEW.ts)
  ON CONFLICT (series) DO UPDATE
     SET first_ts = least(s.first_ts, EXCLUDED.first_ts), last_ts = greatest(s.last_ts, EXCLUDED.last_ts)
   WHERE s.first_ts > EXCLUDED.first_ts OR s.last_ts < EXCLUDED.last_ts;
  RETURN NULL;
END
$$;

-- Step 1: note rows older than `t` from now on. The bound is a literal in the trigger's WHEN
-- (a function call there would cost every ingested row). Never moves backwards.
CREATE FUNCTION history_note_before(t timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(7341002119);
  IF t <= (SELECT noted_before FROM history_settings) THEN
    RETURN;
  END IF;
  -- On TimescaleDB, row triggers on the hypertable apply to every chunk, compressed or not.
  DROP TRIGGER IF EXISTS history_note_late_rows ON history;
  EXECUTE format('CREATE TRIGGER history_note_late_rows AFTER INSERT OR UPDATE OF series, ts ON history'
              || ' FOR EACH ROW WHEN (NEW.ts < %L::timestamptz) EXECUTE FUNCTION history_note_row()', t);
  UPDATE history_settings SET noted_before = t;
END
$$;

-- Step 2: spans of the rows in [closed_before, t), then closed_before = t. Returns the number
-- of series whose span was created or widened. `t` must have been noted (step 1) first.
CREATE FUNCTION history_close_before(t timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  n bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(7341002119);
  SELECT * INTO s FROM history_settings;
  IF t <= s.closed_before THEN
    RETURN 0;
  END IF;
  IF t > s.noted_before THEN
    RAISE EXCEPTION 'history_close_before(%): rows before it are not noted yet (history_note_before first)', t;
  END IF;
  INSERT INTO history_series_span AS sp (series, first_ts, last_ts)
  SELECT series, min(ts), max(ts) FROM history WHERE ts >= s.closed_before AND ts < t GROUP BY series
  ON CONFLICT (series) DO UPDATE
     SET first_ts = least(sp.first_ts, EXCLUDED.first_ts), last_ts = greatest(sp.last_ts, EXCLUDED.last_ts)
   WHERE sp.first_ts > EXCLUDED.first_ts OR sp.last_ts < EXCLUDED.last_ts;
  GET DIAGNOSTICS n = ROW_COUNT;
  UPDATE history_settings SET closed_before = t;
  RETURN n;
END
$$;

-- The chunks (TimescaleDB) or partitions (plain PostgreSQL) of `history` with their ranges
-- and the size of their index on (series, ts): what the chunk sizing check at start reads.
CREATE FUNCTION history_chunk_sizes()
RETURNS TABLE (range_start timestamptz, range_end timestamptz, index_bytes bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF (SELECT timescale FROM history_settings) THEN
    -- TimescaleDB: chunks and their indexes (a compressed chunk's rows are elsewhere; its
    -- index here is near empty, and only uncompressed, recent chunks matter for sizing).
    RETURN QUERY EXECUTE
      'SELECT c.range_start, c.range_end, coalesce(sum(pg_relation_size(i.indexrelid)), 0)::bigint
         FROM timescaledb_information.chunks c
         LEFT JOIN pg_index i ON i.indrelid = format(''%I.%I'', c.chunk_schema, c.chunk_name)::regclass
        WHERE c.hypertable_schema = current_schema() AND c.hypertable_name = ''history'' AND NOT c.is_compressed
        GROUP BY c.range_start, c.range_end';
  ELSE
    RETURN QUERY
      SELECT p.range_start, p.range_end, coalesce(sum(pg_relation_size(i.indexrelid)), 0)::bigint
        FROM history_partitions p
        LEFT JOIN pg_index i ON i.indrelid = to_regclass(quote_ident(p.name))
       GROUP BY p.range_start, p.range_end;
  END IF;
END
$$;
