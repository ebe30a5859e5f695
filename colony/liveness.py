"""What each I/O task of the colony last did: the truth behind ``GET /health``.

A cell that talks to the outside (the proxy's Telegram poller, the llm cell's provider calls)
takes an :class:`IoStatus` from :class:`Liveness` through its ``CellSpec.io`` and reports each
attempt: :meth:`IoStatus.succeeded` or :meth:`IoStatus.failed` with a kind (``auth``,
``transient``, ``flood``, ``http_401``...) and a one-line error that holds no secret. A status
outlives the cell instance that reports to it (a restarted cell keeps its history), and costs
the reporting cell an attribute write or two: nothing is logged or computed here.

:func:`health` turns the statuses, the storage and the cells' states into the ``/health``
document: ``failing`` when the colony cannot do its work (its storage cannot be written, the
writer thread is gone), ``degraded`` when an I/O task's last attempt failed or a cell failed
past its restart limit, ``ok`` otherwise; each reason one sentence an operator can act on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from colony.ids import now_ms

ERROR_CHARS = 500
"""How much of an error text a status keeps (the log line has it whole)."""


class IoState(StrEnum):
    UNKNOWN = "unknown"
    """No attempt yet (the poller has not polled, no provider call was made)."""
    OK = "ok"
    """The last attempt succeeded."""
    FAILING = "failing"
    """The last attempt failed: ``last_error_kind`` and ``last_error`` say how."""
    STANDBY = "standby"
    """The task does not run on this node by design (another cluster node leads it)."""


class IoStatus:
    """One I/O task of one cell: its last success, its last error and since when it is in
    its present state."""

    __slots__ = (
        "failures",
        "last_error",
        "last_error_kind",
        "last_error_ms",
        "last_ok_ms",
        "path",
        "since_ms",
        "state",
        "task",
    )

    def __init__(self, path: str, task: str) -> None:
        self.path = path
        self.task = task
        """What the task does (``telegram_poll``, ``provider``)."""
        self.state = IoState.UNKNOWN
        self.since_ms = now_ms()
        """When the task entered its present state."""
        self.last_ok_ms: int | None = None
        self.last_error_ms: int | None = None
        self.last_error_kind: str | None = None
        self.last_error: str | None = None
        self.failures = 0
        """Attempts failed in a row (0 after a success)."""

    def succeeded(self) -> None:
        at = now_ms()
        if self.state is not IoState.OK:
            self.state, self.since_ms = IoState.OK, at
        self.last_ok_ms = at
        self.failures = 0

    def failed(self, kind: str, error: str) -> None:
        """An attempt failed; ``error`` is one line without secrets (cut to ``ERROR_CHARS``)."""
        at = now_ms()
        if self.state is not IoState.FAILING:
            self.state, self.since_ms = IoState.FAILING, at
        self.failures += 1
        self.last_error_ms = at
        self.last_error_kind = kind
        self.last_error = error[:ERROR_CHARS]

    def standby(self) -> None:
        """The task pauses by design (another node runs it): neither a success nor a failure."""
        if self.state is not IoState.STANDBY:
            self.state, self.since_ms = IoState.STANDBY, now_ms()
        self.failures = 0

    def reason(self) -> str:
        """Why this task degrades the colony, in one sentence (for a failing task)."""
        return (
            f"{self.path} {self.task}: {self.last_error} ({self.last_error_kind}; "
            f"{self.failures} attempt(s) failed in a row since {_iso(self.since_ms)})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "task": self.task,
            "state": self.state.value,
            "last_success_secs": None if self.last_ok_ms is None else self.last_ok_ms // 1000,
            "last_ok_ms": self.last_ok_ms,
            "last_error_kind": self.last_error_kind,
            "last_error": self.last_error,
            "last_error_ms": self.last_error_ms,
            "since_ms": self.since_ms,
            "failures": self.failures,
        }


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


class Liveness:
    """Every I/O task's status in one colony, by cell path and task name."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], IoStatus] = {}

    def task(self, path: str, name: str) -> IoStatus:
        """The status of ``name`` in the cell at ``path`` (made on first ask, then kept: a
        restarted cell reports to the same one)."""
        key = (path, name)
        status = self._tasks.get(key)
        if status is None:
            status = self._tasks[key] = IoStatus(path, name)
        return status

    def tasks(self) -> list[IoStatus]:
        return sorted(self._tasks.values(), key=lambda s: (s.path, s.task))


class Health(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    """The colony works, but something it talks to does not (see the reasons)."""
    FAILING = "failing"
    """The colony cannot do its work: its storage cannot be written."""


@dataclass(slots=True)
class Storage:
    """What the health needs to know of the colony's database."""

    writer_alive: bool
    unavailable: str | None
    """Why writes fail now (:meth:`colony.persist.db.ColonyDb.unavailable`), or None."""
    kept: int = 0
    """Writes held until the storage takes them again."""


@dataclass(slots=True)
class Report:
    status: Health
    reasons: list[str] = field(default_factory=list)


def judge(storage: Storage, tasks: Iterable[IoStatus], failed_cells: Iterable[str]) -> Report:
    """The colony's health from its storage, its I/O tasks and its failed cells."""
    report = Report(Health.OK)
    if not storage.writer_alive:
        report.status = Health.FAILING
        report.reasons.append(
            "storage: the writer thread has stopped, nothing more is committed; restart the "
            "daemon (the log names what stopped it)"
        )
    elif storage.unavailable is not None:
        report.status = Health.FAILING
        report.reasons.append(
            f"storage: {storage.unavailable}; ingress is refused until writes work again"
        )
    for status in tasks:
        if status.state is IoState.FAILING:
            report.reasons.append(status.reason())
            if report.status is Health.OK:
                report.status = Health.DEGRADED
    for path in failed_cells:
        report.reasons.append(
            f"{path}: the cell failed past its restart limit and takes no message; fix the "
            f"cause (see cell_failed in the log), then meclaw cells revive {path}"
        )
        if report.status is Health.OK:
            report.status = Health.DEGRADED
    return report
