"""What a cell is, seen from the runtime.

A cell type registers a :class:`CellType`: its name, its class of concurrency and a factory
that builds a cell from a :class:`CellSpec`. A cell answers ``handle(message)`` with zero or
more contents (JSON objects whose ``header`` becomes the next hop). Long-running cells also
have ``run(ctx)``, an I/O loop that emits source messages through ``ctx.emit``.

Cell modules import this module, never the router.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from colony.celltables import TablesHost
from colony.config.models import CellBlock, ColonyConfig, Contract
from colony.envelope import Envelope, JsonObject
from colony.liveness import Liveness
from colony.observability import Logger

if TYPE_CHECKING:
    from pydantic import BaseModel


class CellClass(StrEnum):
    STATEFUL = "stateful"
    """One message at a time, in order; may own ``cell.db``; spawned on first message."""
    STATELESS = "stateless"
    """Up to ``params.max_concurrency`` messages at once; may finish out of order."""
    LONG_RUNNING = "long_running"
    """Handles messages and runs an I/O loop; started at boot."""


@dataclass(frozen=True, slots=True)
class Emission:
    """A content object plus the target the cell names. The target only matters when it is a
    ``/colony/...`` endpoint; otherwise the sender's out-edges decide."""

    content: JsonObject
    target: str | None = None


Output = JsonObject | Emission


@dataclass(frozen=True, slots=True)
class CellSpec:
    """Everything a factory needs to build one cell."""

    path: str
    type: str
    folder: Path | None
    """The cell's folder in the tree (its config, seeds and scripts); None for cells made in
    code."""
    params: Any
    contract: Contract
    cell: CellBlock
    colony: ColonyConfig
    log: Logger | None = None
    """The colony's logger bound to this cell (None outside a colony)."""
    tables: TablesHost | None = None
    """The colony's database, for a cell that keeps its tables there so that its writes
    commit with its hand-offs (:mod:`colony.celltables`); None outside a colony."""
    leader: Leader | None = None
    """In a cluster, who runs what must run once in the whole colony (a poller, a timer);
    None for a daemon alone, which always leads."""
    io: Liveness | None = None
    """Where a cell that talks to the outside reports each attempt of its I/O tasks
    (``io.task(path, "telegram_poll")``), for ``GET /health``; None outside a colony."""
    state: Path | None = None
    """Where the cell keeps its own files (``cell.db``): :attr:`folder` unless the colony's
    state lives outside the tree (``--state-dir``, :mod:`colony.statedir`); a cell makes it
    when it first writes there. Given None, it is :attr:`folder`."""

    def __post_init__(self) -> None:
        if self.state is None:
            object.__setattr__(self, "state", self.folder)


class Leader(Protocol):
    """Singleton work in a cluster: a named lease that one node holds at a time, renewed with
    the node's partitions and taken over when its holder dies (``colony.cluster.member``)."""

    async def lead(self, name: str) -> bool:
        """Hold the lease ``name`` (take it if it is free or expired); True while held. Call
        it again before each round of the singleton work: the lease may have moved."""
        ...

    def leads(self, name: str) -> bool:
        """Whether this node held ``name`` at its last renewal (no round trip)."""
        ...

    async def resign(self, name: str) -> None:
        """Give ``name`` up now (the cell closes: failed past its restarts, or stopping), so
        another node takes it at its next renewal instead of after a lease, or never."""
        ...


@dataclass(frozen=True, slots=True)
class ParamProblem:
    """One thing wrong with a cell's ``params`` (reported by ``--validate`` and at boot)."""

    path: tuple[str | int, ...]
    """Inside ``params``."""
    code: str
    message: str
    hint: str | None = None
    warning: bool = False
    """A warning (``--validate-strict`` makes it an error) rather than an error."""
    about_key: bool = False
    """The finding is about the key itself, not its value: the loader may show it even where
    the value came from a ``${VAR}`` (a value-finding there is reworded so nothing echoes)."""


_Model = TypeVar("_Model", bound="BaseModel")

ParamsCheck = Callable[[Any, "Path | None"], list[ParamProblem]]
"""Checks a cell's params (and files in its folder) without building the cell."""


@runtime_checkable
class Cell(Protocol):
    async def handle(self, message: Envelope) -> Sequence[Output] | None:
        """Answer one message; None or ``[]`` emits nothing (no dead letter)."""
        ...


class CellContext(Protocol):
    """What a long-running cell's I/O loop can do."""

    path: str

    async def emit(
        self, content: JsonObject, target: str | None = None, *, key: str | None = None
    ) -> None:
        """Emit a source message (fresh trace, empty context, the default TTL). Returns once
        it is journalled, so the caller may acknowledge its source. ``key`` (e.g. an update id
        of the outside service) makes the emission idempotent: a key taken in before is
        dropped."""
        ...


@runtime_checkable
class LongRunning(Protocol):
    async def run(self, ctx: CellContext) -> None:
        """The I/O loop; returning or raising ends it (raising restarts the cell)."""
        ...


@runtime_checkable
class Closable(Protocol):
    async def close(self) -> None:
        """Release resources (files, connections) when the cell sleeps or stops."""
        ...


@dataclass(frozen=True, slots=True)
class CellType:
    """A registered cell type."""

    name: str
    cell_class: CellClass
    factory: Callable[[CellSpec], Cell | Awaitable[Cell]]
    default_max_concurrency: int = 4
    """Stateless cells: concurrency when ``params.max_concurrency`` is absent."""
    check_params: ParamsCheck | None = None
    """Run by the loader, so ``--validate`` reports bad params before anything starts."""
    backstop_floor_ms: Callable[[Any], int | None] | None = None
    """The least ``message_timeout`` that cannot cut a legitimate message of this cell (used
    when the cell sets none): an llm call retried to its limit must end in its own typed
    ``timeout``, not in the colony's backstop."""
    options: dict[str, Any] = field(default_factory=dict)
    checks_own_emits: bool = False
    """The cell type checks its emissions against ``contract.emits`` itself (the code cell
    turns a violation into its own error emission), so the colony does not check them again
    under ``strict_validation``."""
    handles_concurrently: bool = False
    """Long-running cells: take messages while earlier ones are still being handled (up to
    ``params.max_concurrency``, else :attr:`default_max_concurrency`), so one slow call to the
    outside does not hold the mailbox (the mcp and subcolony cells). Replies may finish out of
    order. False: one at a time, in order. Either way a restart lets the messages in hand
    settle first (for at most :data:`colony.runner.RESTART_DRAIN_S`; when a message's outcome
    restarts the cell, while the I/O loop still runs, so replies that come through it arrive)
    and a stop cancels them (:mod:`colony.runner`)."""
    runs_ahead: Callable[[CellSpec], bool] | None = None
    """Whether a message for this cell (its spec given) may reach its mailbox before the unit
    that delivers it is committed (:mod:`colony.journal`, "Running ahead"): what the cell does
    with a message reaches the rest of the world only through its emissions, or through
    ``colony.db`` in the writer's order (a store's writes). A crash may then re-run it for a
    new message (a new id) made by the re-run of the cell before it. A cell that talks to the
    outside (a model, a channel, the web) waits for the commit, so a crash never repeats what
    left the colony for a hand-off that was never durable. None: never."""


class PydanticCheck:
    """A :data:`ParamsCheck` from a pydantic model, plus an optional check of the parsed
    params against the cell's folder (e.g. that a script file exists).

    Top-level keys the model does not declare are what meclaw's parsers skip: each is a
    warning (``unknown_param``) and is left out before the model sees the rest, so a
    meclaw tree carrying one loads. A model that keeps extra keys (``extra="allow"``, the
    code cell's script knobs) judges them itself. Nested blocks stay as strict as the model.
    """

    def __init__(
        self,
        model: type[BaseModel],
        extra: Callable[[Any, Path | None], list[ParamProblem]] | None = None,
    ) -> None:
        self.model = model
        """The cell type's params model (the cell validates its params with the same one)."""
        self._extra = extra
        self._keeps_extra = model.model_config.get("extra") == "allow"
        self._known = tuple(
            name for key, info in model.model_fields.items() for name in {key, info.alias} if name
        )

    def ignored_keys(self, params: Mapping[str, Any]) -> list[ParamProblem]:
        """A warning for each top-level key the model does not read."""
        if self._keeps_extra:
            return []
        return [ignored_key(key, self._known) for key in params if key not in self._known]

    def __call__(self, params: Any, folder: Path | None) -> list[ParamProblem]:
        from pydantic import ValidationError

        from colony.config.schema_errors import diagnostics_from

        value = {} if params is None else params
        problems: list[ParamProblem] = []
        if isinstance(value, dict):
            problems = self.ignored_keys(value)
            if problems:
                value = {k: v for k, v in value.items() if k in self._known}
        try:
            parsed = self.model.model_validate(value)
        except ValidationError as exc:
            return problems + [
                ParamProblem(d.path, d.code, d.message, d.hint, about_key=d.code == "unknown_key")
                for d in diagnostics_from(exc, self.model, file="")
            ]
        return problems + (self._extra(parsed, folder) if self._extra is not None else [])


def birth_params(model: type[_Model], spec: CellSpec) -> _Model:
    """``spec.params`` read with ``model`` at a cell's start; a refusal is a ``ValueError``
    naming each bad key and why, without pydantic's echo of the input (a token, a secret
    from ``${VAR}``). ``--validate`` has refused such params already; this is the start's
    own guard."""
    from pydantic import ValidationError

    try:
        return model.model_validate({} if spec.params is None else spec.params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'params'}: {e['msg']}"
            for e in exc.errors()
        )
        raise ValueError(f"invalid {spec.type} params: {problems}") from None


def ignored_key(key: str, known: Iterable[str]) -> ParamProblem:
    """The warning for a params key the cell type does not read (the closest known key named)."""
    from colony.config.schema_errors import closest

    names = sorted(known)
    guess = closest(key, names)
    hint = f"did you mean '{guess}'? " if guess else ""
    hint += f"Known params: {', '.join(names)}; remove the key if it is a note."
    return ParamProblem(
        (key,),
        "unknown_param",
        f"'{key}' is not a param this cell type reads; it is ignored",
        hint,
        warning=True,
        about_key=True,
    )


def pydantic_check(
    model: type[BaseModel], extra: Callable[[Any, Path | None], list[ParamProblem]] | None = None
) -> PydanticCheck:
    """The :class:`PydanticCheck` of ``model`` (what each cell type registers)."""
    return PydanticCheck(model, extra)


def param_checks(cell_types: Mapping[str, CellType]) -> dict[str, ParamsCheck]:
    """Each type's params check, keyed by type name, for the loader."""
    return {name: t.check_params for name, t in cell_types.items() if t.check_params is not None}
