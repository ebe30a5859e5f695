"""The daemon's exception tree: every error the kernel raises on purpose is a ColonyError.

    ColonyError                 base; every subclass has a stable snake_case ``code``
    ├── ConfigError             a colony tree that cannot be loaded (boot or --validate)
    ├── BootError               a tree that loaded but cannot run
    ├── ReadProblem             a config file that cannot be used; ``code`` is its diagnostic's
    │                           (colony.config.reading)
    ├── EnvFileError            the ``.env`` file, or a line of it (colony.config.substitute)
    ├── ExpressionSyntaxError   CEL that does not parse (colony.expressions)
    ├── EvaluationError         CEL that has no value for this message (colony.expressions)
    ├── EngineUnavailableError  no such CEL engine on this machine; also a RuntimeError
    │                           (colony.expressions)
    ├── JsonRefused             a JSON text the daemon will not take; also a ValueError
    │                           (colony.jsonwire)
    ├── ColonyDbError           ``colony.db`` cannot be used (colony.persist.schema)
    │   └── SchemaError         … written by a newer or a foreign schema
    ├── PersistenceError        ``colony.db`` could not be written (colony.persist.writer)
    │   ├── StorageUnavailable  … nothing was committed; try again later
    │   ├── UnitRejected        … this unit alone cannot be stored
    │   └── ClaimOutcomeUnknown … a cluster claim whose COMMIT went unanswered
    │                           (colony.persist.pg.claims)
    ├── ReadFailed              ``colony.db`` could not be read (colony.reads)
    ├── LeaseHeldError          another daemon holds the root (colony.lease)
    ├── DsnProblem              a ``cluster.dsn`` libpq would not parse; also a ValueError
    │                           (colony.cluster.dsn)
    ├── PartitionPathError      a ``cluster.partition_by`` that cannot be read; also a
    │                           ValueError (colony.cluster.partition)
    ├── UnknownCellError        no cell at this path; also a LookupError (colony.operations)
    ├── QueryError              a filter of a read that cannot be read; also a ValueError
    │                           (colony.queries)
    ├── ApiError                a request answered with an HTTP error (colony.api)
    ├── BodyRefused             a ``POST /messages`` body understood but refused; also a
    │                           ValueError (colony.api_models)
    ├── BodyTimeout             a request body that did not arrive in time (colony.httpguard)
    ├── RenderError             the SVG picture could not be drawn (colony.dot)
    ├── PruneError              ``meclaw prune`` cannot prune as asked (colony.prune)
    ├── StateDirError           a ``--state-dir`` that cannot hold the state (colony.statedir)
    ├── SettingsError           an ``OTEL_*`` variable the colony cannot follow; also a
    │                           ValueError (colony.telemetry.settings)
    ├── IngressRefused          a message from outside refused at a door (colony.ingress)
    ├── ShippedDataMissing      a file meant to ship with the package is not installed
    │                           (colony.shipped)
    ├── InitRefused             ``meclaw init`` will not write into this folder (colony.init)
    └── BackupRefused           ``meclaw backup`` cannot copy this colony's state
                                (colony.backup)

A class that callers (or the standard library) catch as a builtin keeps that builtin as a
second base, so joining the tree changed no ``except`` clause.

Errors a *user* causes are reported with the file, the key, what is wrong and how to fix it;
they never reach the user as a traceback. Not in the tree, on purpose: bugs in the daemon
itself; a module's private signals (``_Invalid``, ``_Constant``, …), which never leave it;
and the cells' own errors, which a cell turns into a reply.
"""

from __future__ import annotations


class ColonyError(Exception):
    """Base of every error the daemon reports on purpose."""

    code = "colony_error"


class ConfigError(ColonyError):
    """The colony tree has at least one error-level diagnostic.

    It carries every diagnostic found, not just the first: a user fixing a tree wants the
    whole list in one run.
    """

    code = "config_invalid"

    def __init__(self, diagnostics: list[object], report: str | None = None) -> None:
        self.diagnostics = diagnostics
        super().__init__(report or f"the colony tree has {len(diagnostics)} problem(s)")


class BootError(ColonyError):
    """The tree loaded but cannot run (a cell type's worker cannot start, …)."""

    code = "boot_failed"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))
