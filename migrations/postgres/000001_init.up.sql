-- Revision log schema. As in etcd, an empty keyspace is at revision 1 and the
-- first write is revision 2. Revisions are gapless and assigned in commit order by
-- the writer (see etcdshim/sqlstore/writer.go); they are never auto-increment ids.
CREATE TABLE kv_meta (
    name TEXT NOT NULL PRIMARY KEY,
    val  BIGINT NOT NULL
);
INSERT INTO kv_meta (name, val) VALUES ('revision', 1), ('compact_revision', 0);

CREATE TABLE kv_current (
    name            BYTEA NOT NULL PRIMARY KEY,
    create_revision BIGINT NOT NULL,
    mod_revision    BIGINT NOT NULL,
    version         BIGINT NOT NULL,
    lease           BIGINT NOT NULL DEFAULT 0,
    val             BYTEA NOT NULL
);
CREATE INDEX kv_current_lease ON kv_current (lease) WHERE lease <> 0;

CREATE TABLE kv_log (
    revision        BIGINT NOT NULL,
    sub             INTEGER NOT NULL,
    name            BYTEA NOT NULL,
    deleted         SMALLINT NOT NULL,
    create_revision BIGINT NOT NULL,
    version         BIGINT NOT NULL,
    lease           BIGINT NOT NULL,
    prev_revision   BIGINT NOT NULL,
    val             BYTEA NOT NULL,
    PRIMARY KEY (revision, sub)
);
CREATE UNIQUE INDEX kv_log_name_revision ON kv_log (name, revision);

CREATE TABLE leases (
    id         BIGINT NOT NULL PRIMARY KEY,
    ttl        BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX leases_expires_at ON leases (expires_at);
