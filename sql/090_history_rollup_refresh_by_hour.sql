-- history_rollup_refresh (sql/070_history_rollup.sql) computed its marked hours in one join of
-- the marks with the rows, which the planner may run as a hash join on the series over every
-- partition of history: each pass then read the whole table (found by an audit: 5.4 s for 25
-- marked hours of 720,000 rows in 771 partitions, and a backlog of 556 dense hours beyond the
-- statement timeout on every pass, its marks never cleared). Each marked hour is now read by
-- its own statement, an index range scan of the one partition (or chunk) that holds it: a pass
-- costs the rows of its marked hours, whatever the size of the table.
CREATE OR REPLACE FUNCTION history_rollup_refresh(most int) RETURNS int
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
  FOR i IN 1 .. cardinality(ss) LOOP
    INSERT INTO history_rollup (series, hour, tenant, device_id, attr, n, nn, total, lo, hi)
    SELECT ss[i], hs[i], tenant, device_id, attr, count(*), count(num), sum(num), min(num), max(num)
      FROM (SELECT tenant, device_id, attr, history_number(value) AS num FROM history
             WHERE series = ss[i] AND ts >= hs[i] AND ts < hs[i] + interval '1 hour') h
     GROUP BY tenant, device_id, attr;
  END LOOP;
  RETURN cardinality(ss);
END
$$;
