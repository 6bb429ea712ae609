-- Revision log schema. Keys are VARBINARY: bytes, compared and matched case-sensitively.
CREATE TABLE kv_meta (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    val  BIGINT NOT NULL
) ENGINE=InnoDB;
INSERT INTO kv_meta (name, val) VALUES ('revision', 1), ('compact_revision', 0);

CREATE TABLE kv_current (
    name            VARBINARY(2048) NOT NULL PRIMARY KEY,
    create_revision BIGINT NOT NULL,
    mod_revision    BIGINT NOT NULL,
    version         BIGINT NOT NULL,
    lease           BIGINT NOT NULL DEFAULT 0,
    val             LONGBLOB NOT NULL,
    KEY kv_current_lease (lease),
    KEY kv_current_name (name) -- keys alone, so counting a range reads keys, not values
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC;

CREATE TABLE kv_log (
    revision        BIGINT NOT NULL,
    sub             INT NOT NULL,
    name            VARBINARY(2048) NOT NULL,
    deleted         SMALLINT NOT NULL,
    create_revision BIGINT NOT NULL,
    version         BIGINT NOT NULL,
    lease           BIGINT NOT NULL,
    prev_revision   BIGINT NOT NULL,
    val             LONGBLOB NOT NULL,
    PRIMARY KEY (revision, sub),
    UNIQUE KEY kv_log_name_revision (name, revision)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC;

CREATE TABLE leases (
    id         BIGINT NOT NULL PRIMARY KEY,
    ttl        BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    KEY leases_expires_at (expires_at)
) ENGINE=InnoDB;
