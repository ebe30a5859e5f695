"""The daemon's exception tree.

    ColonyError                 base; every subclass has a stable snake_case ``code``
    ├── ConfigError             a colony tree that cannot be loaded (boot or --validate)
    └── BootError               a tree that loaded but cannot run (a worker cannot start)

Errors a *user* causes are reported with the file, the key, what is wrong and how to fix it;
they never reach the user as a traceback. Bugs in the daemon itself are not ColonyErrors.
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
