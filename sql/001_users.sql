-- Users of the API. `tenant` is the token's `service` claim: every row of every table
-- carries the tenant it belongs to.
CREATE TABLE users (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant        text        NOT NULL,
  username      text        NOT NULL UNIQUE,
  password_hash text        NOT NULL,
  profile       text        NOT NULL,
  created       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX users_tenant ON users (tenant);
