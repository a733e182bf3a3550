-- A stored number whose exponent has five digits or more (`1e200000`, loaded in bulk: ingest
-- stores numbers within a double's range) is beyond what `numeric` holds, and reading it as
-- numeric raised "value overflows numeric format": the rollup pass failed at its hour on every
-- try, so no hour of any series was rolled up or computed again from then on, and the numeric
-- aggregates of its buckets answered 500 (found by an audit; test/history/rollup-bad-values.test.ts).
-- Such a value is now no number for the numeric aggregates, like a string. The reads of rows use
-- the same expression (src/history/aggregate-repo.ts).
CREATE OR REPLACE FUNCTION history_number(value text) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN value ~ '^-?[0-9]' AND value !~ '[eE][+-]?0*[1-9][0-9]{4}' THEN value::numeric END
$$;
