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
--      per row, measured +4 % of PostgreSQL's CPU per COPY on plain PostgreSQL 15 and no
--      difference on TimescaleDB). Recreating the trigger waits for the writes under way.
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

-- Widens the span of a row's series to cover the row's whole chunk (TG_ARGV: the horizon the
-- trigger was created with and the chunk interval in seconds), not just the row's time. Late
-- rows come in runs (a device sending its backlog after an outage, oldest first): after the
-- first of a chunk, the others of that chunk are inside the span already and cost one index
-- probe, not an update each. A span a chunk wider than the data costs a read nothing: its
-- windows are planned with the same chunks.
-- enable_seqscan is off inside it: the probe's plan is made once per session, and one made
-- while the span table was nearly empty would read the whole table for every late row once
-- it holds a span per series (measured 119 instead of 9 µs a row).
CREATE FUNCTION history_note_row() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
  secs double precision := TG_ARGV[1]::double precision;
  chunk_start timestamptz;
BEGIN
  IF EXISTS (SELECT 1 FROM history_series_span WHERE series = NEW.series AND first_ts <= NEW.ts AND last_ts >= NEW.ts) THEN
    RETURN NULL;
  END IF;
  chunk_start := to_timestamp(floor(extract(epoch FROM NEW.ts) / secs) * secs);
  INSERT INTO history_series_span AS s (series, first_ts, last_ts)
  VALUES (NEW.series, least(NEW.ts, chunk_start),
          greatest(NEW.ts, least(chunk_start + secs * interval '1 second', TG_ARGV[0]::timestamptz) - interval '1 microsecond'))
  ON CONFLICT (series) DO UPDATE
     SET first_ts = least(s.first_ts, EXCLUDED.first_ts), last_ts = greatest(s.last_ts, EXCLUDED.last_ts);
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
              || ' FOR EACH ROW WHEN (NEW.ts < %L::timestamptz) EXECUTE FUNCTION history_note_row(%L, %L)',
                 t, t, (SELECT extract(epoch FROM chunk_interval) FROM history_settings));
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
  -- Fresh statistics, so the reads' prepared plans (made per connection, maybe while the table
  -- was nearly empty) are made again with an index lookup of the span.
  IF n > 0 THEN
    ANALYZE history_series_span;
  END IF;
  RETURN n;
END
$$;

-- The labels of a multi-attribute read with their series keys, numbered in the order asked.
-- unnest() would do, but PostgreSQL then estimates the rows from the array it is given: every
-- execution of the prepared statement sees a different count than its generic plan assumed,
-- and it is planned anew each time (measured ~460 against ~210 µs of database CPU for three
-- labels). A PL/pgSQL function is opaque to the planner: one estimate (ROWS), one plan, reused.
CREATE FUNCTION history_labels(labels text[], keys bigint[]) RETURNS TABLE (label text, series bigint, ord bigint)
LANGUAGE plpgsql STABLE ROWS 4 AS $$
BEGIN
  RETURN QUERY SELECT * FROM unnest(labels, keys) WITH ORDINALITY;
END
$$;

-- Before loading many old rows at once (a backfill), with every service instance stopped:
-- forgets the open region, so the rows load without the trigger (a late row costs PostgreSQL
-- ~9.5 µs instead of ~2.6 µs); the next start writes the spans of everything before the new boundary in one pass
-- (a GROUP BY over those rows). Reads in between plan every chunk: start the service after.
CREATE FUNCTION history_reopen() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(7341002119);
  DROP TRIGGER IF EXISTS history_note_late_rows ON history;
  UPDATE history_settings SET closed_before = '-infinity', noted_before = '-infinity';
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
