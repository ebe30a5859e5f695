"""The cluster database's tables, created on first use by any node.

The kernel's tables keep ``colony.db``'s names and columns (``journal``, ``message_log``,
``dead_letters``, ``registry``, ``ingress_keys``, ``meta``), so a query that reads them reads
the same rows on either backend; the journal adds the conversation's ``partition`` and the
``epoch`` it was claimed under (NULL: not yet claimed by the partition's owner). The cluster's
own tables start with ``cluster_``. A colony's tables live in the schema its DSN's
``search_path`` names: give each colony a schema (or a database) of its own.

``seq`` columns are identities: several nodes insert at once, so no node may number rows
itself. Creation is serialised by an advisory lock: two nodes booting together would otherwise
race on ``CREATE TABLE IF NOT EXISTS`` (PostgreSQL's check and create are not atomic).
"""

from __future__ import annotations

from typing import Any

from colony.errors import ColonyError

SCHEMA_VERSION = "1"

_LOCK = 0x636F6C6F  # "colo": (this, 0) is the advisory lock that serialises creating the tables
# (the two-int form: the store and the transcript store use the one-bigint form)

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS registry (
    path TEXT PRIMARY KEY,
    cell_id TEXT NOT NULL,
    cell_type TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS message_log (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    parent_message_id TEXT,
    correlation_id TEXT,
    ttl BIGINT NOT NULL,
    from_path TEXT NOT NULL,
    to_path TEXT NOT NULL,
    reply_to TEXT,
    headers TEXT NOT NULL,
    body_kind TEXT NOT NULL,
    body_payload TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    at_ms BIGINT,
    edges TEXT
);
CREATE INDEX IF NOT EXISTS message_log_trace ON message_log(trace_id);
CREATE INDEX IF NOT EXISTS message_log_created ON message_log(created_at);
CREATE INDEX IF NOT EXISTS message_log_id ON message_log(id);
CREATE INDEX IF NOT EXISTS message_log_at ON message_log(at_ms);
CREATE TABLE IF NOT EXISTS dead_letters (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sender_path TEXT NOT NULL,
    original_target TEXT NOT NULL,
    resolved_target TEXT NOT NULL,
    error_code TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    detail TEXT,
    message_id TEXT,
    replayed_at BIGINT,
    replayed_as TEXT,
    at_ms BIGINT,
    message_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_created ON dead_letters(created_at);
CREATE INDEX IF NOT EXISTS dead_letters_code ON dead_letters(error_code);
CREATE INDEX IF NOT EXISTS dead_letters_trace ON dead_letters(trace_id);
CREATE TABLE IF NOT EXISTS journal (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL,
    cell TEXT NOT NULL,
    sender TEXT NOT NULL,
    envelope TEXT NOT NULL,
    body TEXT NOT NULL,
    partition INTEGER NOT NULL,
    epoch BIGINT
);
CREATE INDEX IF NOT EXISTS journal_id ON journal(id);
CREATE INDEX IF NOT EXISTS journal_partition ON journal(partition, seq);
CREATE TABLE IF NOT EXISTS ingress_keys (
    key TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS ingress_keys_created ON ingress_keys(created_at);
CREATE TABLE IF NOT EXISTS cluster_partitions (
    partition INTEGER PRIMARY KEY,
    owner TEXT,
    epoch BIGINT NOT NULL DEFAULT 0,
    expires_at TIMESTAMPTZ,
    draining BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE TABLE IF NOT EXISTS cluster_nodes (
    node TEXT PRIMARY KEY,
    started_at TIMESTAMPTZ NOT NULL,
    seen_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    api TEXT,
    token TEXT
);
CREATE TABLE IF NOT EXISTS cluster_leaders (
    name TEXT PRIMARY KEY,
    owner TEXT,
    epoch BIGINT NOT NULL DEFAULT 0,
    expires_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS cluster_sessions (
    node TEXT NOT NULL,
    pid INTEGER NOT NULL,
    backend_start TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (pid, backend_start)
);
"""
"""Every table and index of the cluster database (schema :data:`SCHEMA_VERSION`)."""

HANDLING_DDL = """
CREATE TABLE IF NOT EXISTS handling (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    cell TEXT NOT NULL,
    cell_type TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    model TEXT,
    llm_latency_ms BIGINT,
    tokens_prompt BIGINT,
    tokens_completion BIGINT
);
CREATE INDEX IF NOT EXISTS handling_trace ON handling(trace_id);
CREATE INDEX IF NOT EXISTS handling_started ON handling(started_ms);
"""
"""The ``handling`` table (one row per message a cell finished handling)."""

DDL += HANDLING_DDL

_ADDED = (
    ("message_log", "at_ms", "BIGINT"),
    ("message_log", "edges", "TEXT"),
    ("dead_letters", "at_ms", "BIGINT"),
)
"""Columns newer than the first cluster databases (the per-hop record)."""

EPOCH_KEY = (
    "CREATE UNIQUE INDEX IF NOT EXISTS cluster_partitions_epoch "
    "ON cluster_partitions(partition, epoch)"
)
"""Makes ``epoch`` part of a key of ``cluster_partitions``, which the fence needs: PostgreSQL
then counts every change of epoch as a key update, one a ``FOR KEY SHARE`` lock holds off and
re-reads after, however it is written (see :mod:`colony.persist.pg.ownership`). Unique
trivially (``partition`` is the primary key); it must stay non-partial, non-deferrable and on
plain columns, or PostgreSQL does not count its columns as a key."""

DDL += EPOCH_KEY + ";\n"

_INDEXES_ADDED = (
    ("message_log_at", "CREATE INDEX IF NOT EXISTS message_log_at ON message_log(at_ms)"),
    ("handling_started", "CREATE INDEX IF NOT EXISTS handling_started ON handling(started_ms)"),
    (
        "ingress_keys_created",
        "CREATE INDEX IF NOT EXISTS ingress_keys_created ON ingress_keys(created_at)",
    ),
    ("cluster_partitions_epoch", EPOCH_KEY),
)
"""Indexes newer than the first cluster databases, each by its name and the statement that
makes it: the per-hop record's, the ones retention's search for old rows goes by
(:mod:`colony.persist.prune`), and the epoch's key."""


def _upgrade(conn: Any) -> None:
    """Give a database made before the per-hop record, retention or the epoch's key its
    columns, table and indexes. Each statement runs only when what it adds is missing: DDL
    takes its table's lock, and a node booting beside busy ones would wait on their writers
    (see :func:`create`). Building an index on a large table holds its writers for as long."""
    have = {
        (table, column)
        for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name IN ('message_log', "
            "'dead_letters')"
        ).fetchall()
    }
    for table, column, kind in _ADDED:
        if (table, column) not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
    if conn.execute("SELECT to_regclass('handling')").fetchone()[0] is None:
        conn.execute(HANDLING_DDL)
    for index, statement in _INDEXES_ADDED:
        if conn.execute("SELECT to_regclass(%s)", (index,)).fetchone()[0] is None:
            conn.execute(statement)


def _made(conn: Any) -> bool:
    """The schema of this version is there (the last table created, and the version row)."""
    row = conn.execute(
        "SELECT to_regclass('cluster_sessions') IS NOT NULL AND to_regclass('meta') IS NOT NULL"
    ).fetchone()
    if not (row and row[0]):
        return False
    found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return found is not None and found[0] == SCHEMA_VERSION


class ClusterSchemaError(ColonyError):
    """The database holds a colony schema this daemon does not know, or another colony's."""

    code = "cluster_schema_mismatch"


def create(conn: Any, partitions: int, partition_by: str = "trace_id") -> None:
    """Create what is missing, on an autocommit psycopg connection, and the partitions' rows
    (``partitions`` of them; a colony's partition count never changes once rows exist: a
    conversation's partition is a hash modulo that count). Raises :class:`ClusterSchemaError`
    when the database was made for another partition count or schema version."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK,))
        # Only a new database runs the DDL: on one in use, CREATE INDEX IF NOT EXISTS still
        # takes its table's share lock, and a node booting beside busy ones deadlocks with
        # their writers (seen: a joining node's boot against two nodes' hand-offs).
        if not _made(conn):
            conn.execute(DDL)
        else:
            _upgrade(conn)
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_version', %s), ('partitions', %s), "
            "('partition_by', %s) ON CONFLICT (key) DO NOTHING",
            (SCHEMA_VERSION, str(partitions), partition_by),
        )
        found = dict(
            conn.execute(
                "SELECT key, value FROM meta "
                "WHERE key IN ('schema_version', 'partitions', 'partition_by')"
            ).fetchall()
        )
        if found.get("schema_version") != SCHEMA_VERSION:
            raise ClusterSchemaError(
                f"the cluster database holds colony schema version "
                f"{found.get('schema_version')!r}; this daemon reads version {SCHEMA_VERSION}: "
                "point cluster.dsn at a schema of its own or upgrade the daemon"
            )
        if found.get("partitions") != str(partitions):
            raise ClusterSchemaError(
                f"the cluster database was made with {found.get('partitions')} partitions and "
                f"colony.json cluster.partitions says {partitions}: a conversation's partition "
                "depends on that number, so it cannot change while the database holds a "
                f"colony; set cluster.partitions to {found.get('partitions')}"
            )
        if found.get("partition_by") != partition_by:
            raise ClusterSchemaError(
                f"the cluster database's conversations are keyed by "
                f"{found.get('partition_by')!r} and colony.json cluster.partition_by says "
                f"{partition_by!r}: a node keying them otherwise would split conversations "
                "between nodes; every node must read the same colony.json"
            )
        conn.execute(
            "INSERT INTO cluster_partitions(partition) SELECT generate_series(0, %s - 1) "
            "ON CONFLICT (partition) DO NOTHING",
            (partitions,),
        )


REGISTER = (
    "INSERT INTO cluster_sessions(node, pid, backend_start) SELECT %s, pid, backend_start "
    "FROM pg_stat_activity WHERE pid = pg_backend_pid() ON CONFLICT DO NOTHING"
)
"""Note this connection's server session as the node's (see :data:`FENCE_OUT`)."""


FENCE_OUT = (
    "SELECT pg_terminate_backend(a.pid) FROM cluster_sessions s "
    "JOIN pg_stat_activity a ON a.pid = s.pid AND a.backend_start = s.backend_start "
    "JOIN cluster_nodes n ON n.node = s.node "
    "WHERE n.expires_at < now() AND s.node <> %s"
)
"""End the server sessions of nodes whose lease expired. A node paused (SIGSTOP, a frozen VM)
in the middle of a transaction holds its fence's row locks, and with them its partitions, for
as long as the pause lasts: PostgreSQL's ``idle_in_transaction_session_timeout`` does not fire
while a pipeline waits for its Sync. Sessions are named by pid and start time, so a pid the
server reused for someone else's session is never hit."""

FORGET_GONE = (
    "DELETE FROM cluster_sessions s WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a "
    "WHERE a.pid = s.pid AND a.backend_start = s.backend_start)"
)
"""Forget sessions the server no longer has."""
