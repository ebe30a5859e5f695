"""The ``meclaw`` command: parse flags, wire the built-in cells in, run.

This module is a composition root: it may import ``cells``; the kernel may not.
Exit codes: 0 success, 1 the colony is invalid or failed, 2 usage error, 3 internal error
(a bug in the daemon — the message says so; no traceback reaches the user).

An option given before a subcommand (``meclaw --root R dead-letters``) is never ignored:
``--root`` and ``--state-dir`` are passed down to the subcommand, any other option is refused
with a message saying where it belongs.
"""

from __future__ import annotations

import os
import sys
import traceback
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import param_checks
from colony.config.diagnostics import has_errors, render_github, render_json, render_text
from colony.statedir import StateDir
from colony.validate import validate

if TYPE_CHECKING:
    import httpx

    from colony.persist.source import Source

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class LogLevel(StrEnum):
    trace = "trace"
    debug = "debug"
    info = "info"
    warn = "warn"
    error = "error"


class StdioFormat(StrEnum):
    text = "text"
    json = "json"


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    github = "github"


app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Run a colony of LLM agents defined by a directory tree of JSON files.",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _package_version() -> str:
    try:
        return version("colony-daemon")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"meclaw {_package_version()}")
        raise typer.Exit()


def _file_prefix(root: Path) -> str:
    """How diagnostics name files: relative to the working directory, so editors can jump."""
    prefix = os.path.relpath(root)
    return "" if prefix == "." else prefix.replace(os.sep, "/") + "/"


def _usage_error(message: str) -> typer.Exit:
    typer.echo(f"meclaw: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def _failure(message: str) -> typer.Exit:
    typer.echo(f"meclaw: {message}", err=True)
    return typer.Exit(EXIT_INVALID)


_PASSED_DOWN = frozenset({"root", "state_dir"})
"""Options of a command group that its subcommands take over when given before them."""


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _pass_down(ctx: typer.Context) -> None:
    """Before a subcommand runs: hand ``--root`` and ``--state-dir`` down to it when it takes
    them, refuse every other option given before it (it would otherwise be silently
    ignored)."""
    name = ctx.invoked_subcommand or ""
    sub = f"{ctx.command_path} {name}"
    command = ctx.command.get_command(ctx, name) if isinstance(ctx.command, TyperGroup) else None
    takes = {p.name for p in command.params} if command is not None else set()
    for param in ctx.command.params:
        if param.name is None or not _given(ctx, param.name):
            continue
        if param.name in _PASSED_DOWN and param.name in takes:
            ctx.ensure_object(dict)[param.name] = ctx.params[param.name]
            continue
        flag = param.opts[0] if param.opts else param.name
        raise _usage_error(
            f"{flag} was given before `{ctx.invoked_subcommand}`, where it does not apply; "
            f"options go after the command they belong to (see `{sub} --help`)"
        )


def _outer(ctx: typer.Context, name: str, value: Path | None) -> Path | None:
    """A path option of a subcommand (``root``, ``state_dir``): its own, or the one given
    before it (not both, unless they agree)."""
    outer = ctx.obj.get(name) if isinstance(ctx.obj, dict) else None
    if outer is None or outer == value:
        return value
    if not _given(ctx, name):
        return Path(outer)
    flag = "--" + name.replace("_", "-")
    raise _usage_error(
        f"{flag} was given twice ({outer} before `{ctx.info_name}`, {value} after it); give it once"
    )


def _root_of(ctx: typer.Context, root: Path) -> Path:
    """``--root`` of a subcommand: its own, or the one given before it."""
    return _outer(ctx, "root", root) or root


def _state_of(ctx: typer.Context, root: Path, state_dir: Path | None) -> StateDir:
    """Where the state of the colony a subcommand reads is: ``--root`` and ``--state-dir``,
    its own or given before it (the same answer the daemon got, :mod:`colony.statedir`)."""
    return StateDir.of(_root_of(ctx, root), _outer(ctx, "state_dir", state_dir))


@app.callback(invoke_without_command=True)
def run(
    ctx: typer.Context,
    root: Annotated[
        Path, typer.Option("--root", help="Colony root folder (holds colony.json and main/).")
    ] = Path("."),
    do_validate: Annotated[
        bool,
        typer.Option("--validate", help="Check the tree and exit: 0 valid, 1 invalid."),
    ] = False,
    validate_strict: Annotated[
        bool,
        typer.Option("--validate-strict", help="Like --validate, with warnings counted as errors."),
    ] = False,
    env: Annotated[
        Path | None,
        typer.Option("--env", help="File for ${VAR} values (default: <root>/.env)."),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Folder for what the daemon writes: colony.db, log.jsonl, the lease, each "
            "cell's cell.db (default: the root itself, as meclaw; made if missing). With it the "
            "tree is only read.",
        ),
    ] = None,
    log_file: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="JSON log file (default: log.jsonl in the state folder); - is stdout (not in "
            "direct mode).",
        ),
    ] = None,
    log_level: Annotated[
        LogLevel | None,
        typer.Option("--log-level", help="Log level (default: colony.json log_default_level)."),
    ] = None,
    daemon: Annotated[
        bool,
        typer.Option("--daemon", help="Run headless, detached from stdin."),
    ] = False,
    api: Annotated[
        str | None,
        typer.Option("--api", help="Serve the HTTP API on HOST:PORT (e.g. 127.0.0.1:7799)."),
    ] = None,
    api_token_env: Annotated[
        str | None,
        typer.Option(
            "--api-token-env",
            help="Environment variable holding the API's bearer token (required off loopback).",
        ),
    ] = None,
    stdio_format: Annotated[
        StdioFormat,
        typer.Option("--stdio-format", help="Direct mode's wire on stdin/stdout: text or json."),
    ] = StdioFormat.text,
    output: Annotated[
        OutputFormat,
        typer.Option("--format", help="How --validate reports: text, json or github annotations."),
    ] = OutputFormat.text,
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            help="This daemon's name in a cluster (colony.json cluster block; default: "
            "<host name>-<pid>). Without a cluster block it has no effect.",
        ),
    ] = None,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Log at debug level (unless --log-level says otherwise) and keep tracebacks: "
            "on stderr in direct mode, and after an internal error's one-line report.",
        ),
    ] = False,
) -> None:
    """Run the colony under --root, or check it with --validate."""
    if ctx.invoked_subcommand is not None:
        _pass_down(ctx)
        return
    if not root.exists():
        raise _usage_error(f"--root {root}: no such folder")
    if not root.is_dir():
        raise _usage_error(f"--root {root}: not a folder")
    if env is not None and not env.exists():
        raise _usage_error(f"--env {env}: no such file")
    if env is not None and not env.is_file():
        raise _usage_error(
            f"--env {env}: not a regular file (a folder, FIFO or device); name the env file itself"
        )
    if node is not None:
        from colony.cluster.node import node_name_problem

        problem = node_name_problem(node)
        if problem is not None:
            raise _usage_error(f"--node {node!r}: {problem}")

    if do_validate or validate_strict:
        diagnostics = validate(
            root,
            cell_types=BUILTIN_CELL_TYPES,
            env_file=env,
            strict=validate_strict,
            param_checks=param_checks(implemented_cell_types()),
            colony_db=StateDir.of(root, state_dir).colony_db,
        )
        shown = str(root)
        prefix = _file_prefix(root)
        if output is OutputFormat.json:
            sys.stdout.write(render_json(diagnostics, root=shown))
        elif output is OutputFormat.github:
            sys.stdout.write(render_github(diagnostics, root=shown, file_prefix=prefix))
        else:
            sys.stderr.write(render_text(diagnostics, root=shown, file_prefix=prefix))
        raise typer.Exit(EXIT_INVALID if has_errors(diagnostics) else 0)

    from colony.daemon import main as run_daemon
    from colony.lease import LeaseHeldError
    from colony.statedir import StateDirError

    address, token = _api_address(api, api_token_env)
    direct = address is None and not daemon
    if direct and log_file == Path("-"):
        raise _usage_error(
            "--log -: in direct mode stdout carries the colony's answers; give --log a file, "
            "or run with --daemon or --api to log on stdout"
        )
    try:
        code = run_daemon(
            root,
            env_file=env,
            log_file=log_file,
            log_level=log_level.value if log_level is not None else "debug" if debug else None,
            debug=debug,
            api=address,
            api_token=token,
            direct=direct,
            stdio_json=stdio_format is StdioFormat.json,
            version=_package_version(),
            node=node,
            state_dir=state_dir,
        )
    except StateDirError as exc:
        raise _usage_error(str(exc)) from None
    except LeaseHeldError as exc:
        raise _failure(str(exc)) from None
    raise typer.Exit(code)


dead_letters_app = typer.Typer(
    help="List, follow, show and re-drive dead letters.", invoke_without_command=True
)
app.add_typer(dead_letters_app, name="dead-letters")


def _database(state: StateDir) -> Source:
    """The colony's rows, as the daemon on ``state`` wrote them (the one place commands find
    ``colony.db``, or the cluster's database)."""
    from colony.config.loader import cluster_of
    from colony.persist.source import source_for_root

    root = state.root
    cluster = cluster_of(root)  # a cluster's rows are in its database, not in colony.db
    db = source_for_root(root, None if cluster is None else cluster.dsn, state.path)
    if not db.exists():
        if state.separate:
            raise _usage_error(
                f"--state-dir {state.path}: no colony.db (has a daemon run with this --state-dir?)"
            )
        raise _usage_error(f"--root {root}: no colony.db (has a daemon run on this root?)")
    return db


RootOption = Annotated[Path, typer.Option("--root", help="Colony root folder.")]
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="The daemon's --state-dir, where colony.db and the lease are (default: the root).",
    ),
]
TokenEnvOption = Annotated[
    str | None,
    typer.Option("--api-token-env", help="Variable holding the daemon API's bearer token."),
]
ApiUrlOption = Annotated[
    str | None,
    typer.Option(
        "--api",
        help="The running daemon's API, e.g. http://127.0.0.1:7799 (default: the one the "
        "daemon on --root serves).",
    ),
]


@dead_letters_app.callback()
def dead_letters(
    ctx: typer.Context,
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new ones.")] = False,
    error_code: Annotated[str | None, typer.Option("--error-code", help="Only this code.")] = None,
    since: Annotated[int | None, typer.Option("--since", help="Unix seconds.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print one line per dead letter: time, id, code, sender → target, trace id."""
    if ctx.invoked_subcommand is not None:
        _pass_down(ctx)
        return
    from colony.operations import list_dead_letters

    db = _database(_state_of(ctx, root, state_dir))

    def write(line: str) -> None:
        typer.echo(line)
        sys.stdout.flush()

    try:
        list_dead_letters(
            db, error_code=error_code, since=since, as_json=as_json, follow=follow, write=write
        )
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@dead_letters_app.command("show")
def show(
    ctx: typer.Context,
    letter_id: Annotated[int, typer.Argument(help="The dead letter's id (see the listing).")],
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Print one dead letter with the message it stored (headers and body)."""
    from colony.operations import dead_letter_report
    from colony.persist.records import read_dead_letter

    db = _database(_state_of(ctx, root, state_dir))
    row = read_dead_letter(db, letter_id)
    if row is None:
        raise _failure(f"no dead letter #{letter_id} in {db} (see `meclaw dead-letters`)")
    typer.echo(dead_letter_report(row, as_json=as_json))


def _token(token_env: str | None) -> dict[str, str]:
    """The Authorization header from ``--api-token-env VAR`` (a usage error when unset)."""
    if token_env is None:
        return {}
    token = os.environ.get(token_env)
    if not token:
        raise _usage_error(f"--api-token-env {token_env}: the variable is unset or empty")
    return {"Authorization": f"Bearer {token}"}


def _daemon_api(state: StateDir, api: str | None, purpose: str) -> str:
    """The URL of the running daemon's API: ``--api``, else the one the daemon on ``state``
    recorded in its lease."""
    from colony.lease import holder

    if api is not None:
        return api.rstrip("/")
    root = f"{state.root} --state-dir {state.path}" if state.separate else str(state.root)
    running = holder(state.lease)
    if running is None:
        raise _failure(
            f"no daemon is running on {root}; {purpose} goes through a running daemon's API "
            "(start it with --api HOST:PORT, or name one with --api URL)"
        )
    if running.api is None:
        pid = f"pid {running.pid}" if running.pid is not None else "pid unknown"
        raise _failure(
            f"the daemon on {root} ({pid}) serves no HTTP API; restart it with --api "
            f"127.0.0.1:7799, or name an API with --api URL"
        )
    return running.api


def _call(method: str, url: str, headers: dict[str, str], **kwargs: Any) -> httpx.Response:
    import httpx

    try:
        return httpx.request(method, url, headers=headers, timeout=30, trust_env=False, **kwargs)
    except httpx.HTTPError as exc:
        raise _failure(f"cannot reach {url}: {exc}") from None


def _refused(what: str, response: httpx.Response) -> typer.Exit:
    try:
        doc = response.json()
        detail = f"{doc['error']}: {doc['detail']}" if "detail" in doc else str(doc["error"])
    except (ValueError, KeyError, TypeError):
        detail = response.text.strip() or response.reason_phrase
    return _failure(f"{what} refused ({response.status_code} {detail})")


@dead_letters_app.command("replay")
def replay(
    ctx: typer.Context,
    letter_id: Annotated[int, typer.Argument(help="The dead letter's id (see the listing).")],
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    api: ApiUrlOption = None,
    token_env: TokenEnvOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replay a letter that was replayed before.")
    ] = False,
) -> None:
    """Re-drive one dead letter through the running daemon: fresh TTL, same trace. A letter
    is replayed once; --force replays it again."""
    headers = _token(token_env)
    url = _daemon_api(_state_of(ctx, root, state_dir), api, "a replay")
    response = _call(
        "POST",
        f"{url}/colony/dead_letters/{letter_id}/replay",
        headers,
        params={"force": "true"} if force else None,
    )
    if response.status_code == 409:
        raise _failure(
            f"dead letter #{letter_id} was replayed before (`meclaw dead-letters show "
            f"{letter_id}` says when, and as which message); add --force to replay it again"
        )
    if response.status_code != 202:
        raise _refused("replay", response)
    body = response.json()
    typer.echo(f"replayed #{letter_id} as message {body['message_id']} (trace {body['trace_id']})")


cluster_app = typer.Typer(help="Several daemons on one colony (docs/cluster.md).")
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("status")
def cluster_status(
    root: RootOption = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """The cluster's nodes, each partition's owner and lease, and its journal depth."""
    from colony.config.loader import cluster_of

    cluster = cluster_of(root)
    if cluster is None:
        raise _usage_error(
            f"--root {root}: colony.json has no cluster block (or cannot be read: run "
            f"meclaw --root {root} --validate); a daemon alone has no cluster to show"
        )
    from colony.cluster.status import read_status, render

    try:
        status = read_status(cluster.dsn)
    except Exception as exc:  # psycopg's errors may quote the DSN: name the kind only
        raise _failure(
            f"the cluster database did not answer ({type(exc).__name__}); check cluster.dsn "
            "and that the server runs"
        ) from None
    if as_json:
        import json

        typer.echo(json.dumps(status.json()))
        return
    for line in render(status):
        typer.echo(line)


cells_app = typer.Typer(help="List the cells and their status; revive a failed cell.")
app.add_typer(cells_app, name="cells", invoke_without_command=True)


@cells_app.callback()
def cells(
    ctx: typer.Context,
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print every cell the registry holds: path, type, status (active, inactive, failed), id."""
    if ctx.invoked_subcommand is not None:
        _pass_down(ctx)
        return
    from colony.operations import cell_json, cell_line
    from colony.persist.records import read_registry

    rows = read_registry(_database(_state_of(ctx, root, state_dir)))
    for row in rows.values():
        typer.echo(cell_json(row) if as_json else cell_line(row))


@cells_app.command("revive")
def revive(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="The failed cell's path, e.g. /main/agent.")],
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    api: ApiUrlOption = None,
    token_env: TokenEnvOption = None,
) -> None:
    """Revive a failed cell: on a stopped colony in colony.db (it starts at the next boot), on
    a running daemon through its API (it starts now)."""
    from colony.lease import LeaseHeldError
    from colony.operations import UnknownCellError, revive_offline

    state = _state_of(ctx, root, state_dir)
    root = state.root
    headers = _token(token_env)
    if api is None:
        _database(state)
        try:
            done = revive_offline(root, path, state.path)
        except UnknownCellError as exc:
            raise _failure(str(exc)) from None
        except LeaseHeldError:
            pass  # a daemon runs on this root: ask it
        else:
            if not done.revived:
                typer.echo(f"{path} is not failed (status {done.status}); nothing to revive")
            else:
                typer.echo(f"revived {path}: it starts at the next boot of {root}")
            return
    url = _daemon_api(state, api, "reviving a cell of a running colony")
    response = _call("POST", f"{url}/colony/cells/revive", headers, json={"path": path})
    if response.status_code != 200:
        raise _refused("revive", response)
    if not response.json().get("revived"):
        typer.echo(f"{path} is not failed; nothing to revive")
    else:
        typer.echo(f"revived {path} in the running daemon ({url})")


@app.command("demo")
def demo(
    api: Annotated[
        str | None,
        typer.Option(
            "--api",
            help="Serve the HTTP API and web console at HOST:PORT (loopback) while it runs; "
            "`meclaw watch --api http://HOST:PORT` shows the routing from another terminal.",
        ),
    ] = None,
    hold: Annotated[
        bool,
        typer.Option(
            "--hold", help="Keep running after the answer: each line typed is a new question."
        ),
    ] = False,
) -> None:
    """Run the research bot offline: Telegram, the model and search are scripted on 127.0.0.1."""
    from colony.demo import main as run_demo

    address, _ = _api_address(api, None)
    raise typer.Exit(run_demo(address, hold))


@app.command("init")
def init(
    folder: Annotated[Path, typer.Argument(help="Where to write it: a new or empty folder.")],
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Write into a non-empty folder, replacing the starter's files."
        ),
    ] = False,
) -> None:
    """Write a small answering colony to start from: a root hive, one llm cell (any
    OpenAI-compatible API, set in .env) and .env.example."""
    from colony.init import InitRefused, write_starter

    try:
        written = write_starter(folder, force=force)
    except InitRefused as exc:
        raise _usage_error(f"init: {exc}") from None
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo(
        f"next: cp {folder}/.env.example {folder}/.env, fill in the key, then "
        f"meclaw --root {folder} --validate"
    )


@app.command("backup")
def backup(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="The copy to write (a new file).")],
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
) -> None:
    """Copy colony.db to OUT while a daemon may be running on it (SQLite's online backup).
    A cluster's state is in PostgreSQL: back it up with pg_dump."""
    from colony.backup import BackupRefused, backup_colony_db

    try:
        state = _state_of(ctx, root, state_dir)
        done = backup_colony_db(state.root, out, state.path if state.separate else None)
    except BackupRefused as exc:
        raise _failure(f"backup: {exc}") from None
    typer.echo(f"backed up {done.source} to {done.target} ({done.pages} pages, integrity ok)")


class GraphFormat(StrEnum):
    dot = "dot"
    svg = "svg"


@app.command("graph")
def graph(
    ctx: typer.Context,
    root: RootOption = Path("."),
    picture: Annotated[
        GraphFormat,
        typer.Option(
            "--format",
            help="dot (Graphviz text) or svg (drawn by Graphviz's dot or graphviz-pure, "
            "whichever is installed).",
        ),
    ] = GraphFormat.dot,
) -> None:
    """Print the colony's topology as Graphviz DOT, or as SVG with --format svg.

    Without Graphviz: `pip install graphviz-pure` (a self-contained build) gives --format svg
    a renderer; or paste the DOT into any online Graphviz viewer."""
    from colony.dot import RenderError, load_for_picture, render_svg, to_dot

    root = _root_of(ctx, root)
    if not root.is_dir():
        raise _usage_error(f"--root {root}: no such folder")
    loaded = load_for_picture(root, cell_types=BUILTIN_CELL_TYPES)
    if loaded.tree is None:
        prefix = _file_prefix(root)
        sys.stderr.write(render_text(loaded.diagnostics, root=str(root), file_prefix=prefix))
        raise typer.Exit(EXIT_INVALID)
    text = to_dot(loaded.tree)
    if picture is GraphFormat.dot:
        sys.stdout.write(text)
        return
    try:
        svg = render_svg(text)
    except RenderError as exc:
        raise _failure(str(exc)) from None
    sys.stdout.write(svg)


@app.command("trace")
def trace(
    ctx: typer.Context,
    trace_id: Annotated[str, typer.Argument(help="A trace id.")],
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="The rows as one JSON object (as GET /colony/trace answers)."),
    ] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="No colours.")] = False,
) -> None:
    """Print the hop tree of a trace: at each hop the TTL left, when it was routed (ms after
    the trace's first hop), how long the cell took and its outcome (model, latency and tokens
    of an LLM call), the error text of a step that failed, and ✗ where each dead letter of the
    trace died."""
    from rich.console import Console

    from colony.traceview import PLAIN_WIDTH, read_trace, trace_json, trace_tree

    record = read_trace(_database(_state_of(ctx, root, state_dir)), trace_id)
    if record.empty:
        raise _failure(f"no message-log rows and no dead letters for trace {trace_id}")
    if as_json:
        typer.echo(trace_json(record))
        return
    console = Console(highlight=False, no_color=no_color)
    if not console.is_terminal:
        console.width = PLAIN_WIDTH  # a pipe or a file: one line per node, never wrapped
    console.print(trace_tree(record))


@app.command("prune")
def prune(
    ctx: typer.Context,
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be deleted; delete nothing.")
    ] = False,
) -> None:
    """Delete the record past colony.json retention now (message log, handling rows, dead
    letters, ingress keys), in bounded batches; safe beside a running daemon."""
    from colony.prune import PruneError, command

    state = _state_of(ctx, root, state_dir)
    try:
        command(_root_of(ctx, root), _database(state), dry_run=dry_run, write=typer.echo)
    except PruneError as exc:
        raise _failure(str(exc)) from None


@app.command("watch")
def watch(
    ctx: typer.Context,
    root: RootOption = Path("."),
    state_dir: StateDirOption = None,
    api: ApiUrlOption = None,
    token_env: TokenEnvOption = None,
    trace_id: Annotated[str | None, typer.Option("--trace", help="Only this trace.")] = None,
    cell: Annotated[
        str | None,
        typer.Option(
            "--cell", help="Only events whose cell, sender or target starts with this path."
        ),
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            help="Only these kinds, comma-separated: route, handle_start, handle_end, llm, "
            "dead_letter.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Each event's data as one JSON line (for scripts).")
    ] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="No colours.")] = False,
) -> None:
    """Print the running colony's routing live, one line per event: milliseconds since the
    watch started, kind, trace id (its last 8 characters), and what happened (from → to and
    TTL, how long a cell took and its outcome, the model's latency and tokens, dead letters in
    red). Ctrl-C ends it."""
    from colony.watch_stream import DaemonUnreachable, WatchRefused, print_events

    headers = _token(token_env)
    url = _daemon_api(_state_of(ctx, root, state_dir), api, "watching")
    given = {"trace_id": trace_id, "cell": cell, "kind": kind}
    params = {name: value for name, value in given.items() if value is not None}
    try:
        print_events(url, headers=headers, params=params, as_json=as_json, color=not no_color)
    except (DaemonUnreachable, WatchRefused) as exc:
        raise _failure(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    except BrokenPipeError:  # `meclaw watch | head`: the reader has gone, so has the watch
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


def _api_address(
    api: str | None, token_env: str | None
) -> tuple[tuple[str, int] | None, str | None]:
    """``(host, port)`` and the token for ``--api``; usage errors for anything unsafe."""
    import ipaddress

    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise _usage_error(f"--api-token-env {token_env}: the variable is unset or empty")
    if api is None:
        return None, token
    host, sep, port_text = api.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise _usage_error(f"--api {api}: expected HOST:PORT, e.g. 127.0.0.1:7799")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise _usage_error(f"--api {api}: {host} is not an IP address") from None
    if not loopback and token is None:
        raise _usage_error(
            f"--api {api}: binding beyond loopback needs a bearer token (--api-token-env VAR)"
        )
    return (host, int(port_text)), token


def main() -> None:
    """Console-script entry point; turns an unexpected exception into a one-line report
    (followed by its traceback under ``--debug``, read off the command line itself: the
    failure may come before the options are parsed)."""
    try:
        app()
    except Exception as exc:  # the last line of defence: no traceback reaches a user
        debug = "--debug" in sys.argv[1:]
        tail = " and this traceback:" if debug else " (--debug adds its traceback)."
        sys.stderr.write(
            f"meclaw: internal error: {type(exc).__name__}: {exc}\n"
            f"This is a bug in meclaw, not in your colony; please report it with the command "
            f"you ran{tail}\n"
        )
        if debug:
            traceback.print_exception(exc, file=sys.stderr)
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
