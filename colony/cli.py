"""The ``meclaw`` command: parse flags, wire the built-in cells in, run.

This module is a composition root: it may import ``cells``; the kernel may not.
Exit codes: 0 success, 1 the colony is invalid or failed, 2 usage error, 3 internal error
(a bug in the daemon — the message says so; no traceback reaches the user).
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import typer

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import param_checks
from colony.config.diagnostics import has_errors, render_github, render_json, render_text
from colony.validate import validate

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
    log_file: Annotated[
        Path | None,
        typer.Option("--log", help="JSON log file (default: <root>/log.jsonl)."),
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
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Run the colony under --root, or check it with --validate."""
    if ctx.invoked_subcommand is not None:
        return
    if not root.exists():
        raise _usage_error(f"--root {root}: no such folder")
    if not root.is_dir():
        raise _usage_error(f"--root {root}: not a folder")
    if env is not None and not env.is_file():
        raise _usage_error(f"--env {env}: no such file")

    if do_validate or validate_strict:
        diagnostics = validate(
            root,
            cell_types=BUILTIN_CELL_TYPES,
            env_file=env,
            strict=validate_strict,
            param_checks=param_checks(implemented_cell_types()),
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

    address, token = _api_address(api, api_token_env)
    try:
        code = run_daemon(
            root,
            env_file=env,
            log_file=log_file,
            log_level=log_level.value if log_level is not None else None,
            api=address,
            api_token=token,
            direct=address is None and not daemon,
            stdio_json=stdio_format is StdioFormat.json,
            version=_package_version(),
        )
    except LeaseHeldError as exc:
        typer.echo(f"meclaw: {exc}", err=True)
        raise typer.Exit(EXIT_INVALID) from None
    raise typer.Exit(code)


dead_letters_app = typer.Typer(
    help="List, follow and re-drive dead letters.", invoke_without_command=True
)
app.add_typer(dead_letters_app, name="dead-letters")


def _database(root: Path) -> Path:
    db = root / "colony.db"
    if not db.exists():
        raise _usage_error(f"--root {root}: no colony.db (has a daemon run on this root?)")
    return db


@dead_letters_app.callback()
def dead_letters(
    ctx: typer.Context,
    root: Annotated[Path, typer.Option("--root", help="Colony root folder.")] = Path("."),
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new ones.")] = False,
    error_code: Annotated[str | None, typer.Option("--error-code", help="Only this code.")] = None,
    since: Annotated[int | None, typer.Option("--since", help="Unix seconds.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print one line per dead letter: time, id, code, sender → target, trace id."""
    if ctx.invoked_subcommand is not None:
        return
    from colony.operations import list_dead_letters

    db = _database(root)

    def write(line: str) -> None:
        typer.echo(line)
        sys.stdout.flush()

    try:
        list_dead_letters(
            db, error_code=error_code, since=since, as_json=as_json, follow=follow, write=write
        )
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@dead_letters_app.command("replay")
def replay(
    letter_id: Annotated[int, typer.Argument(help="The dead letter's id (see the listing).")],
    api: Annotated[
        str, typer.Option("--api", help="The running daemon's API, e.g. http://127.0.0.1:7799.")
    ] = "http://127.0.0.1:7799",
    token_env: Annotated[
        str | None, typer.Option("--api-token-env", help="Variable holding the API token.")
    ] = None,
) -> None:
    """Re-drive one dead letter through a running daemon: fresh TTL, same trace."""
    import httpx

    headers = {}
    if token_env is not None:
        headers["Authorization"] = f"Bearer {os.environ.get(token_env, '')}"
    try:
        response = httpx.post(
            f"{api.rstrip('/')}/colony/dead_letters/{letter_id}/replay",
            headers=headers,
            timeout=30,
            trust_env=False,
        )
    except httpx.HTTPError as exc:
        typer.echo(f"meclaw: cannot reach {api}: {exc}", err=True)
        raise typer.Exit(EXIT_INVALID) from None
    if response.status_code != 202:
        typer.echo(f"meclaw: replay refused ({response.status_code}): {response.text}", err=True)
        raise typer.Exit(EXIT_INVALID)
    body = response.json()
    typer.echo(f"replayed #{letter_id} as message {body['message_id']} (trace {body['trace_id']})")


@app.command("demo")
def demo() -> None:
    """Run the research bot offline: Telegram, the model and search are scripted on 127.0.0.1."""
    from colony.demo import main as run_demo

    raise typer.Exit(run_demo())


@app.command("graph")
def graph(
    root: Annotated[Path, typer.Option("--root", help="Colony root folder.")] = Path("."),
) -> None:
    """Print the colony's topology as Graphviz DOT (pipe it to `dot -Tsvg`)."""
    from colony.dot import load_for_picture, to_dot

    if not root.is_dir():
        raise _usage_error(f"--root {root}: no such folder")
    loaded = load_for_picture(root, cell_types=BUILTIN_CELL_TYPES)
    if loaded.tree is None:
        prefix = _file_prefix(root)
        sys.stderr.write(render_text(loaded.diagnostics, root=str(root), file_prefix=prefix))
        raise typer.Exit(EXIT_INVALID)
    sys.stdout.write(to_dot(loaded.tree))


@app.command("trace")
def trace(
    trace_id: Annotated[str, typer.Argument(help="A trace id.")],
    root: Annotated[Path, typer.Option("--root", help="Colony root folder.")] = Path("."),
) -> None:
    """Print the hop tree of a trace, with the TTL left at each hop."""
    from colony.operations import trace_lines

    lines = trace_lines(_database(root), trace_id)
    if not lines:
        typer.echo(f"meclaw: no message-log rows for trace {trace_id}", err=True)
        raise typer.Exit(EXIT_INVALID)
    for line in lines:
        typer.echo(line)


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
    """Console-script entry point; turns an unexpected exception into a one-line report."""
    try:
        app()
    except Exception as exc:  # the last line of defence: no traceback reaches a user
        sys.stderr.write(
            f"meclaw: internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in meclaw, not in your colony; please report it with the command "
            "you ran.\n"
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
