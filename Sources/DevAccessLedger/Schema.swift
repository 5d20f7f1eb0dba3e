/// The ledger's schema history. Each migration is applied once, in order, inside one
/// transaction with the `PRAGMA user_version` bump, so a file is always at exactly one
/// version. Never edit a shipped migration: add a new one.
enum Schema {
    struct Migration {
        let version: Int32
        let summary: String
        let sql: String
    }

    /// `PRAGMA application_id` of a ledger ("DVAC"), so `file(1)`-style checks and this
    /// code can tell a ledger from any other SQLite file.
    static let applicationID: Int32 = 0x4456_4143

    /// SHA-256 of nothing before the first event: the chain's genesis `prev_hash`.
    static let genesisHash = String(repeating: "0", count: 64)

    static let migrations: [Migration] = [
        Migration(version: 1, summary: "grants and hash-chained audit events", sql: """
            PRAGMA application_id = \(applicationID);
            CREATE TABLE grants (
                id              INTEGER PRIMARY KEY,
                subject_uid     INTEGER NOT NULL,
                user_name       TEXT    NOT NULL,
                program_path    TEXT,
                program_sha256  TEXT,
                permission      TEXT    NOT NULL,
                device_id       TEXT,
                decision        TEXT    NOT NULL CHECK (decision IN ('allow', 'deny')),
                scope           TEXT    NOT NULL CHECK (scope IN ('once', 'until', 'always')),
                created_usec    INTEGER NOT NULL,
                expires_usec    INTEGER,
                revoked_usec    INTEGER,
                decided_by_uid  INTEGER NOT NULL,
                decided_by_name TEXT    NOT NULL,
                how             TEXT    NOT NULL CHECK (how IN ('consent', 'auth_self', 'admin', 'policy')),
                reason          TEXT    NOT NULL DEFAULT ''
            );
            CREATE TABLE audit_events (
                seq          INTEGER PRIMARY KEY,
                time_usec    INTEGER NOT NULL,
                type         TEXT    NOT NULL,
                actor_uid    INTEGER,
                actor_name   TEXT,
                subject_uid  INTEGER,
                subject_name TEXT,
                permission   TEXT,
                device_id    TEXT,
                program      TEXT,
                node_path    TEXT,
                details      TEXT    NOT NULL DEFAULT '{}',
                prev_hash    TEXT    NOT NULL,
                hash         TEXT    NOT NULL
            );
            """),
        // What enforcement and fast reconcile need on top of version 1.
        Migration(version: 2, summary: "device names, chain head, ACL entry records, indexes", sql: """
            -- Enrichment: the device's human name at the time of the event. Nullable, and the
            -- canonical encoding skips NULL fields, so version 1 events keep their hashes.
            ALTER TABLE audit_events ADD COLUMN device_name TEXT;

            -- The last appended event. Appends continue from here rather than from MAX(seq),
            -- so deleting the newest events leaves a gap that verify() reports.
            CREATE TABLE chain_head (
                id   INTEGER PRIMARY KEY CHECK (id = 1),
                seq  INTEGER NOT NULL,
                hash TEXT    NOT NULL
            );
            INSERT INTO chain_head (id, seq, hash)
                SELECT 1, COALESCE(MAX(seq), 0),
                       COALESCE((SELECT hash FROM audit_events ORDER BY seq DESC LIMIT 1), '\(genesisHash)')
                FROM audit_events;

            -- The ACL entries devaccess itself created, so revoke/expiry remove exactly those
            -- and anything else on a node is reported as drift rather than deleted.
            CREATE TABLE acl_entries (
                id           INTEGER PRIMARY KEY,
                node_path    TEXT    NOT NULL,
                device_id    TEXT    NOT NULL,
                major        INTEGER NOT NULL,
                minor        INTEGER NOT NULL,
                uid          INTEGER,
                gid          INTEGER,
                permissions  TEXT    NOT NULL,
                grant_id     INTEGER REFERENCES grants(id) ON DELETE SET NULL,
                created_usec INTEGER NOT NULL,
                CHECK ((uid IS NULL) <> (gid IS NULL))
            );
            CREATE UNIQUE INDEX acl_entries_node_user ON acl_entries (node_path, uid) WHERE uid IS NOT NULL;
            CREATE UNIQUE INDEX acl_entries_node_group ON acl_entries (node_path, gid) WHERE gid IS NOT NULL;
            CREATE INDEX acl_entries_device ON acl_entries (device_id);

            CREATE INDEX grants_subject ON grants (subject_uid, permission);
            CREATE INDEX grants_pending_expiry ON grants (expires_usec)
                WHERE revoked_usec IS NULL AND expires_usec IS NOT NULL;
            CREATE INDEX audit_events_time ON audit_events (time_usec);
            CREATE INDEX audit_events_subject ON audit_events (subject_uid, time_usec);
            """),
        // Requests waiting for an administrator (policy auth_admin). In the ledger rather than
        // in the broker's memory, so a requester may disconnect and come back, and the broker
        // may restart, without a request being lost or answered twice.
        Migration(version: 3, summary: "requests pending an administrator's approval", sql: """
            CREATE TABLE pending_requests (
                id               INTEGER PRIMARY KEY,
                subject_uid      INTEGER NOT NULL,
                user_name        TEXT    NOT NULL,
                program_path     TEXT,
                -- Permission names separated by single spaces, in the order requested.
                permissions      TEXT    NOT NULL CHECK (permissions <> ''),
                -- As requested; NULL: the policy's Keep= when the request is approved, else once.
                scope            TEXT    CHECK (scope IN ('once', 'for', 'always')),
                duration_sec     INTEGER CHECK (CASE WHEN scope = 'for' THEN duration_sec > 0
                                                     ELSE duration_sec IS NULL END),
                reason           TEXT    NOT NULL DEFAULT '',
                created_usec     INTEGER NOT NULL,
                resolved_usec    INTEGER,
                resolution       TEXT    CHECK (resolution IN ('approved', 'rejected', 'withdrawn')),
                resolved_by_uid  INTEGER,
                resolved_by_name TEXT,
                CHECK ((resolved_usec IS NULL) = (resolution IS NULL))
            );
            CREATE INDEX pending_requests_open ON pending_requests (subject_uid) WHERE resolved_usec IS NULL;
            """),
        // `once` for a request: the grant lasts as long as the process that asked. The process
        // is named by pid, its start time (clock ticks since boot, /proc/PID/stat field 22) and
        // the boot it ran in, so a reused pid or a reboot is never taken for it. A pending
        // request keeps its requester's process the same way, for an approval `--once`; and an
        // administrator may decline a request (no decision recorded), besides reject (a denial).
        Migration(version: 4, summary: "process-bound once grants, declined requests", sql: """
            ALTER TABLE grants ADD COLUMN holder_pid INTEGER;
            ALTER TABLE grants ADD COLUMN holder_start INTEGER;
            ALTER TABLE grants ADD COLUMN holder_boot TEXT;
            CREATE TABLE pending_requests_new (
                id               INTEGER PRIMARY KEY,
                subject_uid      INTEGER NOT NULL,
                user_name        TEXT    NOT NULL,
                program_path     TEXT,
                permissions      TEXT    NOT NULL CHECK (permissions <> ''),
                scope            TEXT    CHECK (scope IN ('once', 'for', 'always')),
                duration_sec     INTEGER CHECK (CASE WHEN scope = 'for' THEN duration_sec > 0
                                                     ELSE duration_sec IS NULL END),
                reason           TEXT    NOT NULL DEFAULT '',
                created_usec     INTEGER NOT NULL,
                resolved_usec    INTEGER,
                resolution       TEXT    CHECK (resolution IN ('approved', 'rejected', 'withdrawn', 'declined')),
                resolved_by_uid  INTEGER,
                resolved_by_name TEXT,
                holder_pid       INTEGER,
                holder_start     INTEGER,
                holder_boot      TEXT,
                CHECK ((resolved_usec IS NULL) = (resolution IS NULL))
            );
            INSERT INTO pending_requests_new (id, subject_uid, user_name, program_path, permissions, scope, duration_sec,
                reason, created_usec, resolved_usec, resolution, resolved_by_uid, resolved_by_name)
                SELECT id, subject_uid, user_name, program_path, permissions, scope, duration_sec, reason, created_usec,
                       resolved_usec, resolution, resolved_by_uid, resolved_by_name FROM pending_requests;
            DROP TABLE pending_requests;
            ALTER TABLE pending_requests_new RENAME TO pending_requests;
            CREATE INDEX pending_requests_open ON pending_requests (subject_uid) WHERE resolved_usec IS NULL;
            CREATE INDEX grants_holder ON grants (holder_pid) WHERE holder_pid IS NOT NULL AND revoked_usec IS NULL;
            """),
        // `devaccess run`: the programs devaccessd started. A run's program carries one group
        // id of its own (`gid`, from RunGroups), which the nodes of its granted permissions name
        // in an ACL entry while the run lasts. AUTOINCREMENT: ids, and so group ids, are never
        // handed out twice, even after rows are deleted. The process is named as a `once`
        // grant's holder is (pid, start time, boot); a row whose process is not known yet
        // (NULL pid) is a run being started.
        Migration(version: 5, summary: "programs started by devaccess run", sql: """
            CREATE TABLE runs (
                id             INTEGER PRIMARY KEY AUTOINCREMENT,
                subject_uid    INTEGER NOT NULL,
                user_name      TEXT    NOT NULL,
                program_path   TEXT    NOT NULL,
                program_sha256 TEXT,
                -- Permission names separated by single spaces, in the order asked.
                permissions    TEXT    NOT NULL CHECK (permissions <> ''),
                gid            INTEGER NOT NULL,
                strict         INTEGER NOT NULL DEFAULT 0 CHECK (strict IN (0, 1)),
                pid            INTEGER,
                start_ticks    INTEGER,
                boot_id        TEXT,
                started_usec   INTEGER NOT NULL,
                ended_usec     INTEGER,
                -- "exited 0", "signal 15", or why the run ended without a status.
                end_status     TEXT,
                CHECK ((pid IS NULL) = (start_ticks IS NULL) AND (pid IS NULL) = (boot_id IS NULL)),
                CHECK ((ended_usec IS NULL) = (end_status IS NULL))
            );
            CREATE INDEX runs_live ON runs (subject_uid) WHERE ended_usec IS NULL;
            """),
        // Privacy switches: a permission switched off for everyone. A row is a switch that is
        // off (`on` deletes it); `until_usec` turns it back on by itself. `switch_saved_nodes`
        // holds, per capture node of a `--hard` switch, the access others gave it before it
        // was taken away (mode, owner, group, ACL text), written before the node is edited and
        // deleted only after it is put back, so a crash either way converges on the next run.
        Migration(version: 6, summary: "privacy switches and the node access they saved", sql: """
            CREATE TABLE switches (
                permission   TEXT    PRIMARY KEY,
                hard         INTEGER NOT NULL CHECK (hard IN (0, 1)),
                by_uid       INTEGER NOT NULL,
                by_name      TEXT    NOT NULL,
                since_usec   INTEGER NOT NULL,
                until_usec   INTEGER,
                reason       TEXT    NOT NULL DEFAULT ''
            );
            CREATE TABLE switch_saved_nodes (
                node_path    TEXT    PRIMARY KEY,
                permission   TEXT    NOT NULL,
                device_id    TEXT    NOT NULL,
                major        INTEGER NOT NULL,
                minor        INTEGER NOT NULL,
                mode         INTEGER NOT NULL,
                owner_uid    INTEGER NOT NULL,
                group_gid    INTEGER NOT NULL,
                -- libacl's numeric text form; NULL: the node had no ACL beyond its mode.
                acl_text     TEXT,
                saved_usec   INTEGER NOT NULL
            );
            """),
        // Location at an accuracy (country ... exact): a grant of location says how precisely
        // the broker tells the user where the machine is, and a pending request keeps the
        // level asked for, so an approval grants that. NULL: not location, or a location row
        // from before levels existed, which meant exact. Grant rows are not hash-chained:
        // the level is in the grant's audit event details, which are.
        Migration(version: 7, summary: "location accuracy of grants and pending requests", sql: """
            ALTER TABLE grants ADD COLUMN accuracy TEXT
                CHECK (accuracy IN ('country', 'city', 'neighborhood', 'street', 'exact'));
            ALTER TABLE pending_requests ADD COLUMN accuracy TEXT
                CHECK (accuracy IN ('country', 'city', 'neighborhood', 'street', 'exact'));
            """),
        // The chain position the last intact walk reached (ChainCheckpoint): reports walk from
        // here to the head instead of from the start. Not chained and not trusted beyond
        // that: its event is re-hashed before each use, and `audit --verify` ignores it.
        // Empty until the first intact walk, so older ledgers verify as before.
        Migration(version: 8, summary: "the verified chain checkpoint reports walk from", sql: """
            CREATE TABLE chain_checkpoint (
                id            INTEGER PRIMARY KEY CHECK (id = 1),
                seq           INTEGER NOT NULL,
                hash          TEXT    NOT NULL,
                events        INTEGER NOT NULL,
                verified_usec INTEGER NOT NULL
            );
            """),
    ]

    static var currentVersion: Int32 { migrations.last?.version ?? 0 }
}
