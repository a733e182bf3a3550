-- A stored number whose exponent has five digits or more (`1e200000`, loaded in bulk: ingest
-- stores numbers within a double's range) is beyond what `numeric` holds, and reading it as
-- numeric raised "value overflows numeric format": the rollup pass failed at its hour on every
-- try, so no hour of any series was rolled up or computed again from then on, and the numeric
-- aggregates of its buckets answered 500 (found by an audit; test/history/rollup-bad-values.test.ts).
-- The same for more than 16,383 digits after the point (`0.` and 20,000 digits). Such a value is
-- now no number for the numeric aggregates, like a string: one of more than 1,000 characters or
-- with an exponent of five digits or more (what is left always fits: at most 1,000 digits moved
-- by at most 9,999 places). The reads of rows use the same expression (src/history/aggregate-repo.ts).
CREATE OR REPLACE FUNCTION history_number(value text) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN value ~ '^-?[0-9]' AND length(value) <= 1000 AND value !~ '[eE][+-]?0*[1-9][0-9]{4}' THEN value::numeric END
$$;
