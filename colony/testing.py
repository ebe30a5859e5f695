"""Drive a real colony from a test (ours or a user's).

::

    from colony.testing import ColonyHarness

    async with ColonyHarness(tree_dir, capture=["/sink", "/park"], env={"KEY": "x"},
                             colony={"message_default_ttl": 64}) as colony:
        trace_id = await colony.send("/capture", body={...}, context={...}, hop={...}, ttl=64)
        await colony.settle(timeout=30)
        colony.captured("/sink")          # messages delivered to a capture cell
        await colony.dead_letters()       # .error_code .sender_path .original_target ...
        await colony.message_log(trace_id)

The harness boots a temporary copy of the tree (the original is never written; pass
``workdir=`` to keep the copy, and boot the same workdir again to test a restart; pass
``state_dir=`` to keep the state out of the copy, as ``meclaw --state-dir`` does), with capture
cells registered at the given paths before boot, so trees whose edges end in ``/sink`` or
``/park`` boot. Everything is real: ``colony.db`` in the copy, real cells, real routing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from colony.boot import ExtraCell, open_colony
from colony.cell import CellClass, CellSpec, CellType, param_checks
from colony.colony import Colony
from colony.config.diagnostics import render_text
from colony.config.loader import load_tree
from colony.envelope import Envelope
from colony.errors import ConfigError
from colony.ingress import source_message_of
from colony.observability import list_logger
from colony.persist.records import DeadLetterRow, MessageLogEntry
from colony.statedir import StateDir
from scripted import *  # noqa: F403  (the scripted provider servers, re-exported)
from scripted import __all__ as _scripted

_SKIP_ON_COPY = shutil.ignore_patterns(
    "*.dot", "*.svg", "cell.db", "cell.db-*", "colony.db", "colony.db-*", "log.jsonl"
)


class CaptureCell:
    """Records every message it receives and emits nothing (so no dead letter follows)."""

    def __init__(self, sink: list[Envelope]) -> None:
        self._sink = sink

    async def handle(self, message: Envelope) -> None:
        self._sink.append(message)


def _capture_type(sink: list[Envelope]) -> CellType:
    return CellType("capture", CellClass.STATEFUL, lambda spec: CaptureCell(sink))


def builtin_cell_types() -> dict[str, CellType]:
    """The cell types this build implements (imported from ``cells`` lazily)."""
    from cells import implemented_cell_types

    return implemented_cell_types()


class ColonyHarness:
    """A colony booted from a tree for the length of an ``async with`` block."""

    def __init__(
        self,
        tree_dir: str | Path,
        *,
        capture: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        colony: Mapping[str, Any] | None = None,
        cell_types: Mapping[str, CellType] | None = None,
        log_level: str = "debug",
        log_messages: bool = True,
        workdir: str | Path | None = None,
        llm_base_url: str | Mapping[str, str] | None = None,
        node: str | None = None,
        state_dir: str | Path | None = None,
    ) -> None:
        self.tree_dir = Path(tree_dir)
        self._state_dir = Path(state_dir) if state_dir is not None else None
        """Where the colony's state goes (``--state-dir``); None: into the copy of the tree."""
        self._node = node
        """The node's name when ``colony`` (or the tree) has a ``cluster`` block."""
        self._capture = list(capture)
        self._env = dict(env or {})
        self._colony_overrides = dict(colony or {})
        self._extra_types = dict(cell_types or {})
        self._log_level = log_level
        self._log_messages = log_messages
        self._workdir = Path(workdir) if workdir is not None else None
        self._llm_base_url = llm_base_url
        self._tmp: Path | None = None
        self._captured: dict[str, list[Envelope]] = {path: [] for path in self._capture}
        self.records: list[dict[str, Any]] = []
        """Every log event of the colony, as dicts (``event``, ``log_level``, fields)."""
        self._colony: Colony | None = None
        self._stack = contextlib.AsyncExitStack()

    # -- context manager ----------------------------------------------------------------------

    async def __aenter__(self) -> ColonyHarness:
        if self._workdir is not None:
            self._tmp = self._workdir
        else:
            self._tmp = Path(tempfile.mkdtemp(prefix="colony-harness-"))
        root = self._tmp / "colony"
        if not root.exists():  # a workdir from an earlier run is booted again, as a restart
            shutil.copytree(self.tree_dir, root, ignore=_SKIP_ON_COPY)
            self._write_overrides(root)
        cell_types = {**builtin_cell_types(), **self._extra_types}
        result = load_tree(
            root, cell_types=cell_types.keys() | {"capture"}, param_checks=param_checks(cell_types)
        )
        if result.tree is None:
            self._cleanup()
            raise ConfigError(
                list(result.diagnostics), render_text(result.diagnostics, root=str(self.tree_dir))
            )
        from cells import close_shared_resources, prepare

        state = StateDir.of(root, self._state_dir)
        try:
            state.prepare()
        except BaseException:
            self._cleanup()
            raise
        extra = [ExtraCell(path, _capture_type(self._captured[path])) for path in self._capture]
        self._stack = contextlib.AsyncExitStack()
        try:
            self._colony = await self._stack.enter_async_context(
                open_colony(
                    result.tree,
                    cell_types,
                    log=list_logger(self.records, self._log_level),
                    prepare=prepare,
                    release=close_shared_resources,
                    extra=extra,
                    log_messages=self._log_messages,
                    node=self._node,
                    state=state,
                )
            )
        except BaseException:
            self._cleanup()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._stack.aclose()
        finally:
            self._cleanup()

    def _on_test_backend(self, root: Path) -> None:
        """With ``COLONY_TEST_BACKEND=postgres`` (``pytest --backend postgres``), a tree that
        has no ``cluster`` block of its own runs as a one-node cluster on a schema of its own
        at ``COLONY_TEST_PG_DSN``: the suite's colonies then keep their journal, message log,
        dead letters and stores in PostgreSQL. The schema is written into the copy's
        colony.json, so a harness booted again on the same workdir finds it again."""
        if os.environ.get(TEST_BACKEND_ENV) != "postgres":
            return
        file = root / "colony.json"
        current = json.loads(file.read_text()) if file.exists() else {}
        merged = {**current, **self._colony_overrides}
        if "cluster" in merged or merged.get("delivery") == "at_most_once":
            return  # a cluster of its own, or nothing a cluster can run
        self._colony_overrides["cluster"] = {"dsn": test_schema(), "partitions": 4}

    def _point_llm_cells(self, root: Path) -> None:
        """Rewrite ``params.base_url`` of llm cells in the copy (one URL for all, or per path)."""
        from colony.config import discovery

        wanted = self._llm_base_url
        if wanted is None:
            return
        candidates = discovery.root_candidates(root)
        if len(candidates) != 1:
            return  # the loader reports it
        for node in discovery.walk(candidates[0]):
            try:
                doc = json.loads(node.config_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            cell = doc.get("cell") if isinstance(doc, dict) else None
            if not isinstance(cell, dict) or cell.get("type") != "llm":
                continue
            url = wanted if isinstance(wanted, str) else wanted.get(node.path)
            if url is None:
                continue
            params = doc.setdefault("params", {})
            if isinstance(params, dict):
                params["base_url"] = url
                node.config_file.write_text(json.dumps(doc, indent=2), encoding="utf-8")

    def _write_overrides(self, root: Path) -> None:
        self._point_llm_cells(root)
        self._on_test_backend(root)
        if self._colony_overrides:
            file = root / "colony.json"
            current = json.loads(file.read_text()) if file.exists() else {}
            current.update(self._colony_overrides)
            file.write_text(json.dumps(current))
        if self._env:
            env_file = root / ".env"
            existing = env_file.read_text() if env_file.exists() else ""
            lines = "".join(f"{key}={value}\n" for key, value in self._env.items())
            env_file.write_text(
                existing + ("\n" if existing and not existing.endswith("\n") else "") + lines
            )

    def _cleanup(self) -> None:
        if self._tmp is not None and self._workdir is None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- driving ------------------------------------------------------------------------------

    @property
    def colony(self) -> Colony:
        if self._colony is None:
            raise RuntimeError("the harness is not running; use it in 'async with'")
        return self._colony

    @property
    def root(self) -> Path:
        """The temporary copy of the tree the colony runs on."""
        if self._tmp is None:
            raise RuntimeError("the harness is not running; use it in 'async with'")
        return self._tmp / "colony"

    @property
    def state(self) -> StateDir:
        """Where the colony's state is: the copy of the tree, or ``state_dir``."""
        return StateDir.of(self.root, self._state_dir)

    async def send(
        self,
        target: str,
        body: Any,
        *,
        context: Mapping[str, Any] | None = None,
        hop: Mapping[str, Any] | None = None,
        ttl: int | None = None,
        trace_id: str | None = None,
        reply_to: str | None = None,
    ) -> str:
        """Route a source message (as the HTTP ingress would); returns its trace id.

        ``ttl``, ``context``, ``hop`` and ``trace_id`` are checked as every door checks them
        (:mod:`colony.ingress`; a refusal raises :class:`~colony.ingress.IngressRefused`), with
        one allowance no real door makes: ``ttl=0``, a spent message, for tests of what the
        router does with one. ``reply_to`` is for tests of reply paths only: real ingresses
        never set it.
        """
        colony = self.colony
        message = source_message_of(
            target,
            body,
            colony.config,
            ttl=ttl,
            context=context,
            hop=hop,
            trace_id=trace_id,
            allow_spent=True,
        )
        message.reply_to = reply_to
        await colony.send(message)
        return message.trace_id

    async def settle(self, timeout: float = 30) -> None:  # noqa: ASYNC109 (the documented API)
        """Return once nothing is queued or running anywhere (and the log is committed)."""
        import asyncio

        async with asyncio.timeout(timeout):
            await self.colony.wait_idle()
        await self.colony.db.flush()

    def captured(self, path: str) -> list[Envelope]:
        """Messages delivered to the capture cell at ``path``, in arrival order."""
        return list(self._captured[path])

    async def dead_letters(self, error_code: str | None = None) -> list[DeadLetterRow]:
        return await self.colony.db.dead_letters(error_code=error_code)

    async def message_log(self, trace_id: str | None = None) -> list[MessageLogEntry]:
        return await self.colony.db.message_log(trace_id)

    def rows(self, cell_path: str, table: str) -> list[dict[str, Any]]:
        """A cell's table, as dicts in insertion order (read-only): a store's from
        ``colony.db`` (``"<cell path>:<table>"``) or the cluster's database, another cell's
        from its ``cell.db`` (on either backend). Sees
        what is committed: every write whose reply was delivered."""
        import re
        import sqlite3

        from colony.celltables import quoted, table_name

        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", table):
            raise ValueError(f"{table!r} is not a table name")
        runner = self.colony.runners.get(cell_path)
        if runner is None:
            raise ValueError(f"{cell_path} is not a cell of this tree")
        source = self.colony.db.source
        if source.path is None:  # the cluster's database: the store's dialect names the table
            from cells.store.dialect import ROW, dialect_of

            name = dialect_of("postgres").table(table_name(cell_path, ""), table)
            with source.connect() as session:
                found = session.execute("SELECT to_regclass(?)", (name,)).fetchall()
                if found and found[0][0] is not None:
                    cursor = session.execute(f"SELECT * FROM {name} ORDER BY {ROW}")
                    names = [c.name for c in cursor.description]  # type: ignore[attr-defined]
                    return [
                        {k: v for k, v in zip(names, r, strict=True) if k != ROW.strip('"')}
                        for r in cursor.fetchall()
                    ]
        places = [] if source.path is None else [(source.path, table_name(cell_path, table))]
        if runner.spec.state is not None:  # a cell's own cell.db, in a cluster as well
            places.append((runner.spec.state / "cell.db", table))
        for db, name in places:
            if not db.exists():
                continue
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                conn.row_factory = sqlite3.Row
                found = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
                ).fetchone()
                if found is not None:
                    return [
                        dict(r)
                        for r in conn.execute(f"SELECT * FROM {quoted(name)} ORDER BY rowid")
                    ]
            finally:
                conn.close()
        return []

    def logs(self, event: str | None = None, level: str | None = None) -> list[dict[str, Any]]:
        """Log records, optionally only one event name and/or level (``warning``, ``debug``…)."""
        return [
            r
            for r in self.records
            if (event is None or r.get("event") == event)
            and (level is None or r.get("level") == level)
        ]


TEST_BACKEND_ENV = "COLONY_TEST_BACKEND"
TEST_PG_ENV = "COLONY_TEST_PG_DSN"
TEST_SCHEMAS: list[tuple[str, str]] = []
"""``(server DSN, schema)`` of every schema :func:`test_schema` made in this process."""


def test_schema() -> str:
    """A new schema on the test PostgreSQL server, and a DSN whose sessions use it."""
    import uuid
    from urllib.parse import quote

    import psycopg

    server = os.environ.get(TEST_PG_ENV) or "postgresql://postgres@127.0.0.1:5432/test"
    name = f"h_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    TEST_SCHEMAS.append((server, name))
    option = quote(f"-csearch_path={name}", safe="")
    return f"{server}{'&' if '?' in server else '?'}options={option}&application_name={name}"


def drop_test_schemas() -> None:
    """Drop what :func:`test_schema` made (at the end of a test session)."""
    import psycopg

    while TEST_SCHEMAS:
        server, name = TEST_SCHEMAS.pop()
        with contextlib.suppress(psycopg.Error), psycopg.connect(server, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND application_name = %s",
                (name,),
            )
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def spec_for(path: str, params: Any = None) -> CellSpec:
    """A minimal spec for building a cell in a unit test."""
    from colony.config.models import CellBlock, ColonyConfig, Contract

    return CellSpec(
        path=path,
        type="test",
        folder=None,
        params=params,
        contract=Contract(version="1", settings={}),
        cell=CellBlock(type="test"),
        colony=ColonyConfig(),
    )


__all__: Sequence[str] = sorted(["CaptureCell", "ColonyHarness", "spec_for", *_scripted])
