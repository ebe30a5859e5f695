"""``meclaw --root DIR``: boot a colony and run it until SIGINT or SIGTERM.

Boot order: load and check the tree (every problem reported, and the same problems as
``--validate``: its errors refuse the boot, its warnings are said on stderr and logged), take
the root lease (alone, or as cluster member ``--node`` when colony.json has a ``cluster``
block: the tree decides which, so it is read first), open ``colony.db`` (the lease, the log
and ``colony.db`` are in the state folder: the tree unless ``--state-dir`` says otherwise,
:mod:`colony.statedir`), wire the cells,
start, wait for a signal, then stop the cells and commit the dead letters and the message log.

The event loop is uvloop's when it imports (the ``uvloop`` extra), asyncio's own otherwise: the
router, the journal hand-offs and the cell processes' pipes are all loop callbacks, and uvloop
runs them faster. The ``colony_running`` log line names the loop.

Under systemd (``Type=notify``) the daemon says ``READY=1`` once it serves, pings the service
watchdog while the colony's own watchdog has not tripped, and says ``STOPPING=1`` on its way
out (:mod:`colony.sdnotify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from cells import close_shared_resources, implemented_cell_types, prepare
from cells.llm.chat_endpoint import ChatRoute
from cells.metrics import describe_cells
from colony.api import build_app, serve, stopping
from colony.boot import open_colony
from colony.cell import CellType, param_checks
from colony.cluster.node import default_node_name
from colony.colony import Colony
from colony.config.diagnostics import has_errors, render_text
from colony.config.loader import load_tree
from colony.errors import BootError
from colony.lease import RootLease
from colony.observability import file_logger
from colony.persist.schema import ColonyDbError
from colony.sdnotify import Notifier
from colony.statedir import StateDir
from colony.stdio import StdioBridge, line_reader

EXIT_OK = 0
EXIT_FAILED = 1
STDOUT = Path("-")
"""``--log -``: the JSON log lines go to stdout."""


def _log_stream(log_file: Path) -> contextlib.AbstractContextManager[TextIO]:
    if log_file == STDOUT:
        return contextlib.nullcontext(sys.stdout)
    return open(log_file, "a", encoding="utf-8")  # once, at boot


def _say(text: str) -> None:
    sys.stderr.write(f"meclaw: {text}\n")
    sys.stderr.flush()


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed; None (asyncio's default) otherwise."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _loop_name(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


async def run(
    root: Path,
    *,
    env_file: Path | None,
    log_file: Path,
    log_level: str | None,
    display_root: str,
    cell_types: Mapping[str, CellType] | None = None,
    api: tuple[str, int] | None = None,
    api_token: str | None = None,
    direct: bool = False,
    stdio_json: bool = False,
    version: str = "0",
    node: str | None = None,
    debug: bool = False,
    state: StateDir | None = None,
) -> int:
    """Load the tree, take the root lease and run the colony until a signal; the exit code.

    ``node`` is ``--node`` (None when not given). With a ``cluster`` block the daemon runs as
    the member ``node`` or ``<host name>-<pid>`` (:attr:`RootLease.member` holds the name);
    without one ``node`` has no effect, and says so. Raises
    :class:`colony.lease.LeaseHeldError` when the root is not this daemon's to run.
    ``state``: where the colony's state is (default: the tree); the caller has made it
    (:meth:`StateDir.prepare`).
    """
    state = state or StateDir.of(root)
    types = dict(cell_types) if cell_types is not None else implemented_cell_types()
    result = load_tree(
        root,
        cell_types=types.keys(),
        env_file=env_file,
        param_checks=param_checks(types),
    )
    if result.tree is None or has_errors(result.diagnostics):
        sys.stderr.write(render_text(result.diagnostics, root=display_root))
        _say("the colony tree is invalid; nothing was started")
        return EXIT_FAILED
    for warning in result.diagnostics:  # the tree boots; say once what it probably gets wrong
        where = f" {warning.file}" if warning.file else ""
        where += f" at {warning.pointer}" if warning.path else ""
        _say(f"warning[{warning.code}]{where}: {warning.message}")
    tree = result.tree
    if direct and "/" not in tree.hives:
        _say(
            "root must be a hive for direct-mode (stdin/stdout); run with --daemon or --api "
            "for a root that is a cell"
        )
        return EXIT_FAILED
    member = None
    if tree.colony.cluster is not None:
        member = node if node is not None else default_node_name()
    elif node is not None:
        _say(
            f"--node {node} has no effect: colony.json has no cluster block, so this daemon "
            "runs the colony alone"
        )
    level = log_level or tree.colony.log_default_level
    shown = f"{display_root} (state in {state.path})" if state.separate else display_root
    with RootLease(state.lease, member=member) as lease, _log_stream(log_file) as stream:
        # Direct mode runs in someone's terminal: warnings and errors reach it too.
        keep = tree.colony.retention  # log.jsonl rotated by size; stdout never
        log = file_logger(
            stream,
            level,
            echo=sys.stderr if direct else None,
            tracebacks=debug,
            max_bytes=0 if log_file == STDOUT else keep.log_file_max_mb * 1_000_000,
            keep=keep.log_file_keep,
        )
        for warning in result.diagnostics:  # said on stderr above; kept in the log too
            log.warning(
                "config_warning",
                code=warning.code,
                file=warning.file,
                key=warning.pointer if warning.path else None,
                detail=warning.message,
                fix=warning.hint,
            )
        if node is not None and member is None:
            log.warning("node_ignored", node=node, detail="colony.json has no cluster block")
        try:
            async with open_colony(
                tree,
                types,
                log=log,
                prepare=prepare,
                release=close_shared_resources,
                node=member,
                state=state,
                say=None if direct else lambda text: _say(f"warning: {text}"),  # (echoed)
            ) as colony:
                code = await _serve(
                    colony,
                    log,
                    display_root=shown,
                    log_file=log_file,
                    api=api,
                    api_token=api_token,
                    direct=direct,
                    stdio_json=stdio_json,
                    version=version,
                    lease=lease,
                )
        except BootError as exc:
            for problem in exc.problems:
                _say(f"cannot boot: {problem}")
            log.error("boot_failed", problems=exc.problems)
            return EXIT_FAILED
        except ColonyDbError as exc:  # garbage, truncated, foreign: say which file and the fix
            _say(f"cannot boot: {exc}")
            log.error("boot_failed", problems=[str(exc)])
            return EXIT_FAILED
        return EXIT_FAILED if colony.db.lost is not None else code


async def _serve(
    colony: Colony,
    log: Any,
    *,
    display_root: str,
    log_file: Path,
    api: tuple[str, int] | None,
    api_token: str | None,
    direct: bool,
    stdio_json: bool,
    version: str,
    lease: RootLease | None,
) -> int:
    """Run a started colony until a signal (or, in direct mode, the end of stdin)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tripped: list[str] = []

    def trip(detail: str) -> None:
        _say(f"watchdog trip — {detail}; stopping (watchdog_on_trip: exit)")
        tripped.append(detail)
        stop.set()

    colony.on_fatal = trip
    server = None
    chat = ChatRoute()
    notifier = Notifier()
    pinging: asyncio.Task[None] | None = None
    try:
        if api is not None:
            describe_cells(colony)  # GET /metrics: LLM providers, code workers
            app = build_app(colony, token=api_token, extra_routes={("POST", "/llm/chat"): chat})
            try:
                server = await serve(app, *api)
            except OSError as exc:
                _say(f"cannot listen on {api[0]}:{api[1]}: {exc.strerror or exc}")
                return EXIT_FAILED
            port = server.addresses[0][1] if server.addresses else api[1]
            host = f"[{api[0]}]" if ":" in api[0] else api[0]
            _say(f"HTTP API on http://{host}:{port}")
            if lease is not None:  # operator commands given only --root find it here
                lease.announce(api=f"http://{host}:{port}")
            log.info("api_listening", host=api[0], port=port)
        loop_name = _loop_name(loop)
        member = colony.cluster
        log.info("colony_running", loop=loop_name, node=member.node if member else None)
        node = f" as cluster node {member.node}" if member is not None else ""
        _say(
            f"colony running on {display_root}{node} ({_count(len(colony.runners), 'cell')}, "
            f"{_count(len(colony.hives), 'hive')}, {_count(len(colony.edges), 'edge')}, "
            f"{loop_name} loop); "
            f"logs {'on stdout' if log_file == STDOUT else f'in {log_file}'}; "
            "SIGINT or SIGTERM stops it"
        )
        # systemd (Type=notify): booted; pings while the backpressure watchdog has not tripped
        notifier.ready(f"colony running on {display_root}")
        pinging = notifier.keep_alive(lambda: not colony.watchdog.trips)
        if direct:
            bridge = StdioBridge(colony, json_mode=stdio_json, version=version)
            colony.egress = bridge.egress
            reader = asyncio.create_task(bridge.run(line_reader(sys.stdin)))
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for task in (reader, stopper):
                task.cancel()
            if reader.done() and not reader.cancelled():
                reader.result()  # re-raises whatever ended the bridge
        else:
            await stop.wait()
        _say("stopping")
    finally:
        notifier.stopping()
        if server is not None:
            stopping(server.app)  # /ready: 503 for whatever asks before the listener closes
        if pinging is not None:
            pinging.cancel()
        if server is not None:
            await server.cleanup()
        await chat.close()
    return EXIT_FAILED if tripped else EXIT_OK


def main(
    root: Path,
    *,
    env_file: Path | None,
    log_file: Path | None,
    log_level: str | None,
    api: tuple[str, int] | None = None,
    api_token: str | None = None,
    direct: bool = False,
    stdio_json: bool = False,
    version: str = "0",
    node: str | None = None,
    debug: bool = False,
    state_dir: Path | None = None,
) -> int:
    """Run the daemon in the foreground; returns the exit code. ``node``: see :func:`run`;
    ``debug``: the direct-mode stderr lines carry their tracebacks (``--debug``).
    ``state_dir`` is ``--state-dir`` (None: the state stays in the tree); raises
    :class:`colony.statedir.StateDirError` when it cannot hold the state."""
    state = StateDir.of(root, state_dir)
    state.prepare()  # before the lease, which is a file in it
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(
            run(
                root,
                env_file=env_file,
                log_file=log_file or state.log_file,
                log_level=log_level,
                display_root=str(root),
                api=api,
                api_token=api_token,
                direct=direct,
                stdio_json=stdio_json,
                version=version,
                node=node,
                debug=debug,
                state=state,
            )
        )
