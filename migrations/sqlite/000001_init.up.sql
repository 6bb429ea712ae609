-- Revision log schema. As in etcd, an empty keyspace is at revision 1 and the
-- first write is revision 2. Revisions are gapless and assigned in commit order by
-- the writer (see etcdshim/sqlstore/writer.go); they are never auto-increment ids.
CREATE TABLE kv_meta (
    name TEXT NOT NULL PRIMARY KEY,
    val  INTEGER NOT NULL
);
INSERT INTO kv_meta (name, val) VALUES ('revision', 1), ('compact_revision', 0);

-- Current state: one row per live key, so reads at the current revision never scan history.
CREATE TABLE kv_current (
    name            BLOB NOT NULL PRIMARY KEY,
    create_revision INTEGER NOT NULL,
    mod_revision    INTEGER NOT NULL,
    version         INTEGER NOT NULL,
    lease           INTEGER NOT NULL DEFAULT 0,
    val             BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX kv_current_lease ON kv_current (lease) WHERE lease <> 0;
-- Keys alone, so counting a range reads keys, not values.
CREATE INDEX kv_current_name ON kv_current (name);

-- History: every change, in (revision, sub) order; (name, revision) serves historical reads.
CREATE TABLE kv_log (
    revision        INTEGER NOT NULL,
    sub             INTEGER NOT NULL,
    name            BLOB NOT NULL,
    deleted         INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    version         INTEGER NOT NULL,
    lease           INTEGER NOT NULL,
    prev_revision   INTEGER NOT NULL,
    val             BLOB NOT NULL,
    PRIMARY KEY (revision, sub)
) WITHOUT ROWID;
CREATE UNIQUE INDEX kv_log_name_revision ON kv_log (name, revision);

CREATE TABLE leases (
    id         INTEGER NOT NULL PRIMARY KEY,
    ttl        INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX leases_expires_at ON leases (expires_at);
