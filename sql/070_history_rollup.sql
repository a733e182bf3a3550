-- Hourly rollups for aggregate reads (docs/messaging.md §6, "Aggregates from hourly rollups").
-- An aggregate over a day of 1 Hz values reads 86,400 rows; the same from rollups reads 24.
-- The same tables and functions on both layouts (plain PostgreSQL and TimescaleDB), so both
-- answer the same numbers: a rollup holds exact numeric sums, minima and maxima, and the read
-- combines them exactly as it would combine the rows.
--
-- history_rollup holds, per series and UTC hour before `rolled_before`, the count of its rows,
-- how many hold a number, and their numeric sum, min and max. It stays exact as rows arrive:
--   1. history_rollup_note_before(t): from now on, a row inserted with ts < t marks its
--      (series, hour) in history_rollup_dirty (trigger below, which fires only for such late
--      rows; the bound is a literal in the trigger's WHEN). Recreating the trigger waits for
--      the writes under way, so every row written after it with ts < t is marked.
--   2. history_rollup_advance(t): rollups of the rows in [rolled_before, t), then
--      rolled_before = t. Rows committed after its snapshot with ts < t were marked (step 1).
--   3. history_rollup_refresh(): the marked hours before rolled_before computed again from
--      their rows. A mark is taken (deleted) before the rows are read, so a row committed
--      between the two is read and its mark stays for the next refresh: never less, sometimes
--      an hour computed twice.
-- A read serves from a rollup only an hour that lies wholly in its range, before
-- rolled_before, not marked, and wholly inside one of its buckets; the rest of the range is
-- read from the rows (src/history/aggregate-repo.ts). The marks, the rollups and the rows are
-- read in one statement, so in one snapshot. History rows are insert-only; rows deleted by hand
-- leave their hour's rollup as it was (history_rollup_rebuild() computes everything again).
-- Every statement here is the same on both layouts.

ALTER TABLE history_settings
  ADD COLUMN rolled_before timestamptz NOT NULL DEFAULT '-infinity',
  ADD COLUMN rollup_noted_before timestamptz NOT NULL DEFAULT '-infinity',
  ADD CONSTRAINT history_settings_rollup_noted_first CHECK (rollup_noted_before >= rolled_before);

CREATE TABLE history_rollup (
  series    bigint      NOT NULL,
  hour      timestamptz NOT NULL,
  tenant    text COLLATE "C" NOT NULL,
  device_id text COLLATE "C" NOT NULL,
  attr      text COLLATE "C" NOT NULL,
  n         bigint      NOT NULL, -- rows
  nn        bigint      NOT NULL, -- rows holding a number
  total     numeric,              -- their sum, min and max (null: none holds a number)
  lo        numeric,
  hi        numeric,
  PRIMARY KEY (series, hour, tenant, device_id, attr)
);

CREATE TABLE history_rollup_dirty (
  series bigint      NOT NULL,
  hour   timestamptz NOT NULL,
  PRIMARY KEY (series, hour)
);

-- A stored value as a number for the numeric aggregates, null when it is none (a JSON null of
-- a numeric attribute); the same expression the reads of rows use. Not STRICT: PostgreSQL
-- inlines it only without (measured 4x slower as a call).
CREATE FUNCTION history_number(value text) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN value ~ '^-?[0-9]' THEN value::numeric END
$$;

CREATE FUNCTION history_rollup_mark() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO history_rollup_dirty (series, hour)
  VALUES (NEW.series, date_bin(interval '1 hour', NEW.ts, timestamptz 'epoch'))
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$$;

-- Step 1. Never moves backwards.
CREATE FUNCTION history_rollup_note_before(t timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  IF t <= (SELECT rollup_noted_before FROM history_settings) THEN
    RETURN;
  END IF;
  DROP TRIGGER IF EXISTS history_rollup_late_rows ON history;
  EXECUTE format('CREATE TRIGGER history_rollup_late_rows AFTER INSERT OR UPDATE OF series, ts ON history'
              || ' FOR EACH ROW WHEN (NEW.ts < %L::timestamptz) EXECUTE FUNCTION history_rollup_mark()', t);
  UPDATE history_settings SET rollup_noted_before = t;
END
$$;

-- Step 2, at most `step` at a time (a long history is rolled up in several transactions): the
-- rollups of the rows in [rolled_before, least(t, rolled_before + step)). Returns the new
-- rolled_before. `t` must be an hour start that was noted (step 1) first.
CREATE FUNCTION history_rollup_advance(t timestamptz, step interval) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
  s history_settings;
  range_lo timestamptz;
  range_hi timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  SELECT * INTO s FROM history_settings;
  IF t <= s.rolled_before THEN
    RETURN s.rolled_before;
  END IF;
  IF t > s.rollup_noted_before OR t <> date_bin(interval '1 hour', t, timestamptz 'epoch') THEN
    RAISE EXCEPTION 'history_rollup_advance(%): not an hour start, or rows before it are not noted yet', t;
  END IF;
  range_lo := s.rolled_before;
  IF range_lo = '-infinity' THEN
    -- The first time: from the first row's hour (or nothing to do).
    range_lo := (SELECT date_bin(interval '1 hour', min(ts), timestamptz 'epoch') FROM history WHERE ts < t);
    IF range_lo IS NULL THEN
      UPDATE history_settings SET rolled_before = t;
      RETURN t;
    END IF;
  END IF;
  range_hi := least(t, date_bin(interval '1 hour', range_lo + step, timestamptz 'epoch'));
  IF range_hi <= range_lo THEN
    range_hi := least(t, range_lo + interval '1 hour');
  END IF;
  -- Marks of these hours are settled by this pass (taken first: see step 3).
  DELETE FROM history_rollup_dirty WHERE hour >= range_lo AND hour < range_hi;
  DELETE FROM history_rollup WHERE hour >= range_lo AND hour < range_hi;
  INSERT INTO history_rollup (series, hour, tenant, device_id, attr, n, nn, total, lo, hi)
  SELECT series, date_bin(interval '1 hour', ts, timestamptz 'epoch'), tenant, device_id, attr,
         count(*), count(num), sum(num), min(num), max(num)
    FROM (SELECT series, ts, tenant, device_id, attr, history_number(value) AS num
            FROM history WHERE ts >= range_lo AND ts < range_hi) r
   GROUP BY 1, 2, 3, 4, 5;
  UPDATE history_settings SET rolled_before = range_hi;
  RETURN range_hi;
END
$$;

-- Step 3, at most `most` marked hours at a time. Returns how many it settled.
CREATE FUNCTION history_rollup_refresh(most int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  ss bigint[];
  hs timestamptz[];
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  WITH taken AS (
    DELETE FROM history_rollup_dirty d
     USING (SELECT series, hour FROM history_rollup_dirty
             WHERE hour < (SELECT rolled_before FROM history_settings)
             ORDER BY series, hour LIMIT most) x
     WHERE d.series = x.series AND d.hour = x.hour
    RETURNING d.series, d.hour)
  SELECT array_agg(series), array_agg(hour) INTO ss, hs FROM taken;
  IF ss IS NULL THEN
    RETURN 0;
  END IF;
  DELETE FROM history_rollup r USING unnest(ss, hs) AS u(series, hour)
   WHERE r.series = u.series AND r.hour = u.hour;
  INSERT INTO history_rollup (series, hour, tenant, device_id, attr, n, nn, total, lo, hi)
  SELECT u.series, u.hour, h.tenant, h.device_id, h.attr, count(*), count(h.num), sum(h.num), min(h.num), max(h.num)
    FROM unnest(ss, hs) AS u(series, hour)
    JOIN LATERAL (SELECT tenant, device_id, attr, history_number(value) AS num FROM history
                   WHERE series = u.series AND ts >= u.hour AND ts < u.hour + interval '1 hour') h ON true
   GROUP BY 1, 2, 3, 4, 5;
  RETURN cardinality(ss);
END
$$;

-- Rollups of hours whose rows are gone (retention dropped their partitions or chunks): removed,
-- so a read over them answers what the rows say (nothing). Returns how many were removed.
CREATE FUNCTION history_rollup_forget_expired() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  first_kept timestamptz;
  n bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  IF (SELECT timescale FROM history_settings) THEN
    -- TimescaleDB
    EXECUTE 'SELECT min(range_start) FROM timescaledb_information.chunks
              WHERE hypertable_schema = current_schema() AND hypertable_name = ''history''' INTO first_kept;
  ELSE
    SELECT min(range_start) INTO first_kept FROM history_partitions;
  END IF;
  DELETE FROM history_rollup WHERE hour < coalesce(first_kept, 'infinity');
  GET DIAGNOSTICS n = ROW_COUNT;
  DELETE FROM history_rollup_dirty WHERE hour < coalesce(first_kept, 'infinity');
  RETURN n;
END
$$;

-- Everything again: after rows were deleted by hand, or before loading many old rows at once
-- (with history_reopen(), every service instance stopped): drops the trigger (old rows load
-- without marking their hours) and the rollups; the next pass rolls the history up from its
-- first row, in steps of a day. Until then reads read rows.
CREATE FUNCTION history_rollup_rebuild() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(7341002120);
  DROP TRIGGER IF EXISTS history_rollup_late_rows ON history;
  TRUNCATE history_rollup, history_rollup_dirty;
  UPDATE history_settings SET rolled_before = '-infinity', rollup_noted_before = '-infinity';
END
$$;
