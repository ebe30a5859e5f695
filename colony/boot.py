"""Booting and stopping a colony, in one order, written down once.

Boot: (the caller loads the tree) → prepare the cell types (warm workers fork before any
thread exists) → open ``colony.db`` → wire the cells → start them. Exit: the reverse. Every
task the colony runs (each cell, the storage watch, the watchdog, the pruner) belongs to one
task group owned by :func:`open_colony`, so an exception in any of them cancels the block it
runs under and surfaces from it, instead of vanishing in a task nobody awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from colony.activity import active_cells
from colony.cell import CellSpec, CellType
from colony.celltables import TablesHost
from colony.colony import Colony
from colony.config.loader import ColonyTree
from colony.config.models import CellBlock, Contract
from colony.edges import EdgeTable, compile_edge
from colony.expressions import Engine, default_engine
from colony.gc_pause import gc_paused
from colony.observability import Logger
from colony.persist import health
from colony.persist.backend import Backend
from colony.persist.celltables import ColonyTablesHost
from colony.persist.db import ColonyDb
from colony.persist.records import read_registry
from colony.retention import start_pruner
from colony.statedir import StateDir
from colony.telemetry.setup import open_tracing

if TYPE_CHECKING:
    from colony.cluster.member import Member

Prepare = Callable[[Iterable[tuple[str, Any]]], Awaitable[None]]
"""Readies the cell types a tree uses, given ``(type, params)`` of every cell (the code
cell's warm worker); raises :class:`colony.errors.BootError` when one cannot start."""

Release = Callable[[], Awaitable[None]]
"""Frees what :data:`Prepare` and the cells share (workers, HTTP clients), at exit."""


@dataclass(frozen=True, slots=True)
class ExtraCell:
    """A cell the embedding code adds before boot (the harness's capture cells)."""

    path: str
    cell_type: CellType
    params: Any = None


@contextlib.asynccontextmanager
async def open_colony(
    tree: ColonyTree,
    cell_types: Mapping[str, CellType],
    *,
    log: Logger,
    prepare: Prepare | None = None,
    release: Release | None = None,
    extra: Sequence[ExtraCell] = (),
    engine: Engine | None = None,
    log_messages: bool = True,
    on_phase: Callable[[str], None] | None = None,
    node: str | None = None,
    say: Callable[[str], None] | None = None,
    state: StateDir | None = None,
) -> AsyncIterator[Colony]:
    """Boot ``tree`` and yield the running colony; stop it, and everything it started, when
    the block ends. Raises :class:`colony.errors.BootError` (a cell type cannot start) and
    :class:`colony.persist.schema.ColonyDbError` (``colony.db`` cannot be opened) before
    anything runs. ``on_phase`` is told as each boot phase ends (``prepare``, ``wire``,
    ``start``): what the boot benchmark times. ``node`` names this daemon in a cluster
    (``colony.json`` ``cluster``: the colony's database is the cluster's, and this node runs
    the conversations of the partitions it owns). ``state`` says where ``colony.db`` and the
    cells' files are (default: in the tree, :mod:`colony.statedir`). ``say`` repeats a boot
    warning the log keeps where the operator looks (the daemon's stderr)."""
    phase = on_phase or _ignore
    state = state or StateDir.of(tree.root)
    try:
        if prepare is not None:
            await prepare((node.type, node.config.params) for node in tree.cells.values())
        phase("prepare")
        db, member = _database(tree, node, log, state)
        try:
            colony = wire(
                tree,
                cell_types,
                db=db,
                log=log,
                extra=extra,
                engine=engine,
                log_messages=log_messages,
                cluster=member,
                state=state,
            )
            phase("wire")
            tracing = open_tracing(tree.colony.telemetry, log, say=say)  # None: off, nothing hung
            if tracing is not None:
                tracing.attach(colony)
            async with asyncio.TaskGroup() as group:

                def spawn(work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
                    return group.create_task(work, name=name)

                membership: asyncio.Task[None] | None = None
                pruning: asyncio.Task[None] | None = None
                try:
                    if member is not None:
                        from colony.cluster.carrier import ColonyCarrier

                        # Its partitions, and their journal rows in the mailboxes, before any
                        # cell runs: as a colony alone redelivers its journal at start.
                        carrier = ColonyCarrier(colony)
                        db.listen(health.reporter(log))  # (what the writer says while joining)
                        await member.join(carrier)
                    with gc_paused():
                        await colony.start(spawn)
                    if member is not None:
                        membership = spawn(member.run(carrier), "cluster member")
                    pruning = start_pruner(db, tree.colony.retention, log, spawn)
                    phase("start")
                    yield colony
                finally:
                    for task in (membership, pruning):
                        if task is not None:
                            task.cancel()
                    try:
                        await colony.stop()
                    finally:
                        try:
                            if member is not None:
                                await member.stop()
                        finally:
                            if tracing is not None:  # the last hand-offs' spans, flushed
                                await tracing.close()
        finally:
            db.close()
    finally:
        if release is not None:
            await release()


def _ignore(phase: str) -> None:
    pass


def _database(
    tree: ColonyTree, node: str | None, log: Logger, state: StateDir
) -> tuple[Backend, Member | None]:
    """``colony.db`` in the state folder, or, with a ``cluster`` block, the cluster's database and
    this node's membership (imported only then: psycopg is the ``cluster`` extra's)."""
    cluster = tree.colony.cluster
    if cluster is None:
        return ColonyDb(state.colony_db), None
    import psycopg

    from colony.cluster.member import Member
    from colony.cluster.node import default_node_name
    from colony.errors import BootError
    from colony.persist.pg.db import PgDb
    from colony.persist.pg.schema import ClusterSchemaError

    name = node or default_node_name()
    try:
        db = PgDb(cluster.dsn, name, cluster.partitions, cluster.lease_ms, cluster.partition_by)
    except ClusterSchemaError as exc:
        raise BootError([str(exc)]) from None
    except psycopg.Error as exc:  # its text may quote the DSN: name the kind only
        raise BootError(
            [
                f"the cluster database did not answer ({type(exc).__name__}); check "
                "colony.json cluster.dsn and that the server runs and accepts connections, "
                "then start the daemon again"
            ]
        ) from None
    return db, Member(cluster, cluster.dsn, name, log.bind(node=name))


@gc_paused()  # everything made here lives as long as the colony
def wire(
    tree: ColonyTree,
    cell_types: Mapping[str, CellType],
    *,
    db: Backend,
    log: Logger,
    extra: Sequence[ExtraCell] = (),
    engine: Engine | None = None,
    log_messages: bool = True,
    cluster: Member | None = None,
    state: StateDir | None = None,
) -> Colony:
    """Wire a loaded tree into a colony. An edge endpoint that names nothing is no refusal
    (the loader warned about it, as ``--validate`` does): what is routed there is
    dead-lettered ``unresolved_path``. ``state``: where each cell keeps its files (default: its
    folder)."""
    engine = engine or default_engine()
    state = state or StateDir.of(tree.root)
    edges = EdgeTable((compile_edge(d, engine) for d in tree.edges), engine)
    colony = Colony(
        root=tree.root,
        config=tree.colony,
        edges=edges,
        hives=frozenset(tree.hives),
        db=db,
        log=log,
        log_messages=log_messages,
        cluster=cluster,
    )
    activity = active_cells(
        list(tree.cells), tree.hives, ((d.from_path, d.to_path) for d in tree.edges)
    )
    registry = read_registry(db.source)  # ids kept across boots, and who failed before
    tables = _tables_host(db)
    for node in tree.cells.values():
        spec = CellSpec(
            path=node.path,
            type=node.type,
            folder=node.folder,
            params=node.config.params,
            contract=node.config.contract,
            cell=node.config.cell,
            colony=tree.colony,
            log=log.bind(cell=node.path),
            tables=tables,
            leader=cluster,
            io=colony.events.io,
            state=state.cell(node.path, node.folder),
        )
        colony.add(spec, cell_types[node.type], activity[node.path], registry)
    for cell in extra:
        spec = CellSpec(
            path=cell.path,
            type=cell.cell_type.name,
            folder=None,
            params=cell.params,
            contract=Contract(version="1", settings={}),
            cell=CellBlock(type=cell.cell_type.name, timeout=-1),
            colony=tree.colony,
            log=log.bind(cell=cell.path),
        )
        colony.add(spec, cell.cell_type, True, registry)
    return colony


def _tables_host(db: Backend) -> TablesHost:
    """Where cells keep their tables: the colony's own database, whichever backend it is."""
    if isinstance(db, ColonyDb):
        return ColonyTablesHost(db)
    from colony.persist.pg.db import PgDb
    from colony.persist.pg.tables import PgTablesHost

    assert isinstance(db, PgDb)
    return PgTablesHost(db)
