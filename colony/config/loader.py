"""Load a colony tree: every file parsed, every problem reported, nothing written.

``load_tree`` is what both the daemon's boot and ``meclaw --validate`` run, so what one
refuses the other refuses. It never stops at the first problem: each file is read
(:mod:`~colony.config.reading`: regular files only, size-capped) and parsed on its own;
folder problems (:mod:`~colony.config.discovery`), schema errors, substitution errors, params
checks, expression errors and endpoint warnings are all collected; on a tree that loaded whole,
required headers no route brings (:mod:`~colony.config.headers`) are added. A tree is returned
only when no error was found. It creates, locks and writes nothing.
"""

from __future__ import annotations

import difflib
import functools
import os
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from colony import paths
from colony.config import discovery, headers, reading
from colony.config.diagnostics import Diagnostic, Severity, format_path, has_errors
from colony.config.jsonpos import Path as JsonPath
from colony.config.jsonpos import Positions
from colony.config.models import CellConfig, ClusterConfig, ColonyConfig, HiveConfig, Modifier
from colony.config.schema_errors import closest, diagnostics_from, json_type_name, tainted
from colony.config.substitute import (
    EnvFileError,
    Substituted,
    Variables,
    load_env_file,
    substitute,
)
from colony.expressions import Engine, ExpressionSyntaxError, default_engine
from colony.gc_pause import gc_paused
from colony.paths import EndpointKind

if TYPE_CHECKING:
    from colony.cell import ParamsCheck

HIVE = "hive"

_MECLAW_ONLY_TYPES = frozenset({"edit", "mcp", "harness", "subcolony", "vault"})

_NAME_A_READ = f"name one of {', '.join(sorted(paths.ANSWERING))}."
"""The hint of an edge to a ``/colony`` path that answers no messages."""

_CONTRACT_PARTS = ("version", "settings", "consumes")
_CONTRACT_KEYS = (
    *_CONTRACT_PARTS,
    "emits",
    "multi_send_capable",
    "ingress",
    "write_surface",
    "transfer",
)


def _check_near_misses(
    block: dict[str, Any], where: JsonPath, known: tuple[str, ...], out: _FileDiagnostics
) -> None:
    """Warn about a key of an open block that looks like a typo of a known one.

    meclaw ignores unknown keys here, so refusing them would break real trees; but
    ``"parmas"`` silently dropping a cell's params deserves a word.
    """
    for key in block:
        if key in known:
            continue
        guess = _close_match(key, known)
        if guess is not None:
            out.warning(
                "suspicious_key",
                f"'{key}' is ignored here; it looks like a misspelt '{guess}'",
                (*where, key),
                f"rename it to '{guess}', or to something less similar if it is a note.",
            )


@functools.lru_cache(maxsize=1024)
def _close_match(key: str, known: tuple[str, ...]) -> str | None:
    """difflib's closest known key, remembered: every cell of a tree repeats the same extra
    keys (``description``), and a fuzzy match costs more than the rest of a file's checks."""
    guess = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    return guess[0] if guess else None


@dataclass(frozen=True, slots=True)
class CellNode:
    """A cell as declared on disk."""

    path: str
    folder: Path
    file: str
    """``config.json`` relative to the colony root."""
    config: CellConfig

    @property
    def type(self) -> str:
        return self.config.cell.type


@dataclass(frozen=True, slots=True)
class HiveNode:
    """A hive (scope marker and transit node) as declared on disk."""

    path: str
    folder: Path
    file: str
    config: HiveConfig


@dataclass(frozen=True, slots=True)
class EdgeDecl:
    """One edge of a hive's ``params.graph.edges``, endpoints resolved."""

    scope: str
    """Path of the hive that declares the edge (endpoints resolve against it)."""
    index: int
    """Position in that hive's edge list."""
    file: str
    from_path: str
    to_path: str
    condition: str | None
    modifier: Modifier | None


@dataclass(frozen=True, slots=True)
class ColonyTree:
    """A colony tree that loaded without errors."""

    root: Path
    """The ``--root`` folder."""
    root_dir: Path
    """The folder that is the node ``/``."""
    colony: ColonyConfig
    cells: dict[str, CellNode]
    hives: dict[str, HiveNode]
    edges: list[EdgeDecl]
    """In declaration order: hives in walk order, each hive's edges in array order."""


@dataclass(slots=True)
class LoadResult:
    tree: ColonyTree | None
    """None when any error was found."""
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.tree is not None


@dataclass(slots=True)  # not frozen: building frozen instances costs a call per field
class _EndpointRef:
    file: str
    text: str
    path: JsonPath
    written: str
    resolved: str


class _FileDiagnostics:
    """Collects one file's findings and places each at its line and column."""

    def __init__(self, file: str, text: str, positions: Positions | None = None) -> None:
        self.file = file
        self.text = text
        self.items: list[Diagnostic] = []
        self._positions = positions
        """Shared by every finding placed in this text (see :class:`Positions`)."""

    def _locate(self, path: JsonPath) -> tuple[int, int] | None:
        if self._positions is None or self._positions.text is not self.text:
            self._positions = Positions(self.text)
        return self._positions.locate(path)

    def add(self, diagnostic: Diagnostic) -> None:
        if diagnostic.line is None and self.text:
            position = self._locate(diagnostic.path)
            if position is not None:
                line, column = position
                diagnostic = Diagnostic(
                    diagnostic.severity,
                    diagnostic.code,
                    diagnostic.message,
                    diagnostic.file,
                    diagnostic.path,
                    diagnostic.hint,
                    line,
                    column,
                    diagnostic.related,
                )
        self.items.append(diagnostic)

    def error(self, code: str, message: str, path: JsonPath = (), hint: str | None = None) -> None:
        self.add(Diagnostic(Severity.ERROR, code, message, self.file, path, hint))

    def warning(
        self,
        code: str,
        message: str,
        path: JsonPath = (),
        hint: str | None = None,
        related: tuple[str, ...] = (),
    ) -> None:
        self.add(
            Diagnostic(Severity.WARNING, code, message, self.file, path, hint, None, None, related)
        )

    def sorted(self) -> list[Diagnostic]:
        return sorted(self.items, key=lambda d: (d.line or 0, d.column or 0))


_relative = discovery.relative


class _Unread:
    """What :func:`_read_json` returns for a file it could not use (``null`` is a value)."""


UNREAD = _Unread()


def _read_json(file: Path, out: _FileDiagnostics) -> Any:
    """The parsed document, or :data:`UNREAD` after reporting why it cannot be used."""
    try:
        data = reading.read_bytes(file, reading.MAX_CONFIG_BYTES)
        out.text = reading.decode(data)
        return reading.parse_json(out.text)
    except FileNotFoundError:
        out.error(
            "unreadable_file",
            "the file disappeared while the tree was read",
            hint="run again once the tree is no longer being changed.",
        )
    except reading.ReadProblem as problem:
        out.add(
            Diagnostic(
                Severity.ERROR,
                problem.code,
                problem.message,
                out.file,
                problem.path,
                problem.hint,
                problem.line,
                problem.column,
            )
        )
    return UNREAD


_SUBSTITUTED_COLONY_KEYS = ("cluster",)
"""The keys of ``colony.json`` whose strings are ``${VAR}``-substituted. meclaw substitutes
none of the file; ``cluster`` is ours, and its DSN holds a password that belongs in the
environment, not in a file."""


def load_colony_config(
    root: Path, out: list[Diagnostic], variables: Variables
) -> ColonyConfig | None:
    """``<root>/colony.json``, or the defaults when the file is absent."""
    file = root / "colony.json"
    if not os.path.lexists(file):
        return ColonyConfig()
    diags = _FileDiagnostics("colony.json", "")
    raw = _read_json(file, diags)
    config: ColonyConfig | None = None
    if raw is UNREAD:
        pass
    elif not isinstance(raw, dict):
        diags.error(
            "wrong_type",
            f"colony.json must be one JSON object, got {json_type_name(raw)}",
            hint='write it as {"schema_version": 1, ...}, or delete the file to use every default.',
        )
    else:
        part = {key: raw[key] for key in _SUBSTITUTED_COLONY_KEYS if key in raw}
        result = substitute(part, variables) if part else Substituted(part)
        broken = _report_substitution(result, diags)
        doc = {**raw, **result.value}
        try:
            config = ColonyConfig.model_validate(doc)
        except ValidationError as exc:
            for d in diagnostics_from(
                exc, ColonyConfig, file="colony.json", substituted=result.substituted_paths
            ):
                if d.path not in broken:  # its unresolved ${...} is the error, said above
                    diags.add(d)
    out.extend(diags.sorted())
    return config


def _report_substitution(result: Substituted, out: _FileDiagnostics) -> set[JsonPath]:
    """Report what substitution could not do (a missing variable, a value that is not
    text); returns the paths whose ``${...}`` was not resolved."""
    for problem in result.problems:
        message, hint = _substitution_text(problem.code, problem.token)
        out.error(problem.code, message, problem.path, hint)
    for where in sorted(result.substituted_paths, key=str):
        if not reading.is_text(_at(result.value, where)):
            out.error(
                "invalid_unicode",
                "the value a ${...} variable gives this string is not valid UTF-8 text "
                "(the value is not shown)",
                where,
                "check the variable's value in the env file or the environment.",
            )
    return {p.path for p in result.problems}


class _TreeLoader:
    def __init__(
        self,
        root: Path,
        cell_types: Collection[str],
        variables: Variables,
        engine: Engine,
        param_checks: Mapping[str, ParamsCheck],
    ) -> None:
        self.root = root
        self.param_checks = param_checks
        self.cell_types = sorted(set(cell_types) | {HIVE})
        self.variables = variables
        self.engine = engine
        self.diagnostics: list[Diagnostic] = []
        self.cells: dict[str, CellNode] = {}
        self.hives: dict[str, HiveNode] = {}
        self.edges: list[EdgeDecl] = []
        self.endpoints: list[_EndpointRef] = []
        self.texts: dict[str, str] = {}
        """Texts of the cells whose contracts require headers (see :meth:`check_headers`)."""
        self.failed = False
        self._resolved: dict[tuple[str, str], str] = {}

    def _resolve(self, scope: str, written: str) -> str:
        """An edge endpoint's path; each is needed twice (checked, then declared)."""
        key = (scope, written)
        found = self._resolved.get(key)
        if found is None:
            # Folder names become path segments in NFC (see discovery); so do the names
            # an edge writes, or an edge typed on one system misses a folder made on another.
            normal = written if written.isascii() else unicodedata.normalize("NFC", written)
            found = self._resolved[key] = paths.resolve(scope, normal)
        return found

    # -- one file -------------------------------------------------------------------------

    def load_node(self, node: discovery.NodeDir) -> None:
        file = _relative(self.root, node.config_file)
        out = _FileDiagnostics(file, "")
        self._load_node(node, file, out)
        found = out.sorted()
        self.failed = self.failed or has_errors(found)
        self.diagnostics.extend(found)

    def _load_node(self, node: discovery.NodeDir, file: str, out: _FileDiagnostics) -> None:
        raw = _read_json(node.config_file, out)
        if raw is UNREAD:
            return
        if not isinstance(raw, dict):
            out.error(
                "wrong_type",
                f"a config.json must be one JSON object, got {json_type_name(raw)}",
                hint='start from {"cell": {"type": "..."}, "params": {}, "contract": {...}}.',
            )
            return
        result = substitute(raw, self.variables) if _may_substitute(out.text) else Substituted(raw)
        broken = _report_substitution(result, out)
        doc = result.value

        cell = doc.get("cell")
        cell_type = cell.get("type") if isinstance(cell, dict) else None
        is_hive = cell_type == HIVE
        model: type[BaseModel] = HiveConfig if is_hive else CellConfig
        parsed: BaseModel | None = None
        try:
            parsed = model.model_validate(doc)
        except ValidationError as exc:
            for d in diagnostics_from(exc, model, file=file, substituted=result.substituted_paths):
                out.add(d)

        if isinstance(cell, dict):
            self._check_cell_block(cell, out, result.substituted_paths)
        _check_near_misses(doc, (), ("cell", "params", "contract"), out)
        if is_hive:
            self._check_graph(node.path, file, doc, out, broken)
        else:
            self._check_contract(doc, out)
            if isinstance(cell_type, str) and cell_type in self.param_checks:
                self._check_params(
                    self.param_checks[cell_type], doc.get("params"), node.folder, out, result
                )
            contract = doc.get("contract")
            if isinstance(contract, dict):
                _check_near_misses(contract, ("contract",), _CONTRACT_KEYS, out)

        if has_errors(out.items) or parsed is None:
            return
        if isinstance(parsed, HiveConfig):
            self.hives[node.path] = HiveNode(node.path, node.folder, file, parsed)
            for index, spec in enumerate(parsed.params.graph.edges):
                self.edges.append(
                    EdgeDecl(
                        scope=node.path,
                        index=index,
                        file=file,
                        from_path=self._resolve(node.path, spec.from_),
                        to_path=self._resolve(node.path, spec.to),
                        condition=spec.condition,
                        modifier=spec.modifier,
                    )
                )
        elif isinstance(parsed, CellConfig):
            self.cells[node.path] = CellNode(node.path, node.folder, file, parsed)
            contract = parsed.contract
            if headers.required(contract, "context") or headers.required(contract, "hop"):
                self.texts[file] = out.text  # to place a header finding at its line

    def check_headers(self) -> None:
        """Required context and hop keys no route brings (see :mod:`colony.config.headers`)."""
        cells = {
            path: headers.CheckedCell(path, node.file, node.config.contract)
            for path, node in self.cells.items()
        }
        edges = [
            headers.CheckedEdge(
                e.from_path,
                e.to_path,
                e.modifier,
                f"the edge {e.from_path} → {e.to_path} ({e.file} params.graph.edges[{e.index}])",
            )
            for e in self.edges
        ]
        for finding in headers.check(cells, self.hives, edges):
            if finding.file is None:
                continue
            out = _FileDiagnostics(finding.file, self.texts.get(finding.file, ""))
            out.add(finding)
            self.diagnostics.extend(out.items)

    def _check_cell_block(
        self, cell: dict[str, Any], out: _FileDiagnostics, substituted: set[JsonPath]
    ) -> None:
        cell_type = cell.get("type")
        if "template" in cell or cell_type == "ref":
            where: JsonPath = ("cell", "template") if "template" in cell else ("cell", "type")
            out.error(
                "template_reference",
                "a template reference stands in a live tree; templates are resolved when they "
                "are instantiated",
                where,
                "instantiate the template, or replace this node with the cell it describes.",
            )
            return
        if not isinstance(cell_type, str) or cell_type in self.cell_types:
            return
        shown = "the substituted type" if ("cell", "type") in substituted else repr(cell_type)
        guess = closest(cell_type, self.cell_types)
        hint = f"did you mean '{guess}'? " if guess else ""
        hint += f"Known cell types: {', '.join(self.cell_types)}."
        why = (
            " (a meclaw cell type this daemon does not implement)"
            if cell_type in _MECLAW_ONLY_TYPES
            else ""
        )
        out.error("unknown_cell_type", f"unknown cell type {shown}{why}", ("cell", "type"), hint)

    def _check_params(
        self,
        check: ParamsCheck,
        params: Any,
        folder: Path,
        out: _FileDiagnostics,
        substituted: Substituted,
    ) -> None:
        for problem in check(params, folder):
            where: JsonPath = ("params", *problem.path)
            severity = Severity.WARNING if problem.warning else Severity.ERROR
            if not problem.about_key and tainted(where, substituted.substituted_paths):
                # The message may quote the value, and a substituted value may be a secret.
                out.add(
                    Diagnostic(
                        severity,
                        problem.code,
                        f"{format_path(where)} is not valid with the value its ${{...}} "
                        f"variable gives it ({problem.code}); the value is not shown",
                        out.file,
                        where,
                        "check the variable's value in the env file or the environment.",
                    )
                )
            else:
                out.add(
                    Diagnostic(
                        severity, problem.code, problem.message, out.file, where, problem.hint
                    )
                )

    def _check_contract(self, doc: dict[str, Any], out: _FileDiagnostics) -> None:
        contract = doc.get("contract")
        if contract is None:
            out.error(
                "contract_incomplete",
                "the cell has no contract; every cell declares version, settings and consumes",
                ("contract",),
                'add "contract": {"version": "1", "settings": {}, "consumes": {}}.',
            )
            return
        if not isinstance(contract, dict):
            return  # the schema check already reported the wrong type
        for part in _CONTRACT_PARTS:
            if part not in contract:
                example = '"1"' if part == "version" else "{} (empty is fine)"
                out.error(
                    "contract_incomplete",
                    f"contract.{part} is missing",
                    ("contract", part),
                    f'add "{part}": {example}.',
                )
        if contract.get("version") == "":
            out.error(
                "contract_incomplete",
                "contract.version is empty",
                ("contract", "version"),
                'give the contract a version string such as "1".',
            )

    # -- a hive's graph -------------------------------------------------------------------

    def _check_graph(
        self,
        scope: str,
        file: str,
        doc: dict[str, Any],
        out: _FileDiagnostics,
        broken: set[JsonPath],
    ) -> None:
        params = doc.get("params")
        graph = params.get("graph") if isinstance(params, dict) else None
        edges = graph.get("edges") if isinstance(graph, dict) else None
        if not isinstance(edges, list):
            return
        for index, edge in enumerate(edges):
            if not isinstance(edge, dict):
                continue
            at: JsonPath = ("params", "graph", "edges", index)
            for end in ("from", "to"):
                written = edge.get(end)
                if isinstance(written, str):
                    self.endpoints.append(
                        _EndpointRef(
                            file, out.text, (*at, end), written, self._resolve(scope, written)
                        )
                    )
            condition = edge.get("condition")
            if isinstance(condition, str) and (*at, "condition") not in broken:
                self._check_expression(condition, (*at, "condition"), "condition", out)
            modifier = edge.get("modifier")
            if not isinstance(modifier, dict):
                continue
            for slot in ("set_context", "set_hop"):
                exprs = modifier.get(slot)
                if not isinstance(exprs, dict):
                    continue
                for key, source in exprs.items():
                    where = (*at, "modifier", slot, key)
                    if isinstance(source, str) and where not in broken:
                        self._check_expression(source, where, "modifier", out)
            if modifier.get("restore_ttl") is True and not isinstance(condition, str):
                out.error(
                    "restore_ttl_unconditional",
                    "an edge with restore_ttl needs a condition: unconditional, it would "
                    "restore the budget of every message it takes and a loop through it "
                    "could never end",
                    (*at, "modifier", "restore_ttl"),
                    'add a bounding condition such as "int(context.iter) < 12".',
                )

    def _check_expression(
        self, source: str, where: JsonPath, kind: str, out: _FileDiagnostics
    ) -> None:
        try:
            program = self.engine.compile(source)
        except (TypeError, ValueError, RecursionError) as exc:  # the engine's own failure
            out.error(
                f"{kind}_syntax",
                f"the {kind} expression cannot be compiled: {type(exc).__name__}",
                where,
                "simplify the expression; conditions read only 'context' and 'hop'.",
            )
            return
        except ExpressionSyntaxError as exc:
            out.add(
                Diagnostic(
                    Severity.ERROR,
                    f"{kind}_syntax",
                    f"the {kind} expression does not parse: {exc.reason} (column {exc.column})",
                    out.file,
                    where,
                    "fix the CEL syntax; conditions read only 'context' and 'hop'.",
                    None,
                    None,
                    tuple(exc.caret().splitlines()),
                )
            )
            return
        if program.check_error is not None:
            out.warning(
                "expression_type",
                f"the {kind} expression does not type-check: {program.check_error}; it errors "
                "at runtime wherever that part is evaluated, and an erroring edge never fires",
                where,
                "expressions can read only 'context' and 'hop'; check names and operand types.",
                (source,),
            )

    # -- the whole tree -------------------------------------------------------------------

    def check_endpoints(self, known: set[str]) -> None:
        # A hive's edges often name the same missing cell (``/sink``, made at runtime) and its
        # text holds them all: one guess per target and one index per text, not one per edge.
        guesses: dict[str, str | None] = {}
        positions: dict[str, Positions] = {}
        for ref in self.endpoints:
            target = ref.resolved
            if target in known:
                continue
            kind = paths.colony_endpoint_kind(target)
            if kind is EndpointKind.READ:
                continue
            where = positions.get(ref.file)
            if where is None or where.text is not ref.text:
                where = positions[ref.file] = Positions(ref.text)
            out = _FileDiagnostics(ref.file, ref.text, where)
            if kind is EndpointKind.INVALID:
                out.warning(
                    "colony_endpoint_invalid",
                    f"edge endpoint {target} is not an endpoint; messages to it are dead-lettered",
                    ref.path,
                    _NAME_A_READ,
                )
            elif kind is not None:
                what = (
                    "answers HTTP requests only"
                    if kind is EndpointKind.HTTP_ONLY
                    else "is no /colony endpoint"
                )
                out.warning(
                    "colony_endpoint_unknown",
                    f"edge endpoint {target} {what}; messages to it are dead-lettered as "
                    "colony_endpoint_unimplemented",
                    ref.path,
                    _NAME_A_READ,
                )
            else:
                if target not in guesses:
                    guesses[target] = closest(target, known)
                guess = guesses[target]
                hint = f"did you mean {guess}? " if guess else ""
                hint += (
                    "create the cell, or fix the path (relative paths resolve against the hive "
                    "that declares the edge). Cells added later by runtime mutations are "
                    "invisible to --validate."
                )
                written = "" if ref.written == target else f" ('{ref.written}' in scope)"
                out.warning(
                    "dangling_endpoint",
                    f"edge endpoint {target}{written} resolves to no cell, hive or /colony "
                    "endpoint",
                    ref.path,
                    hint,
                )
            self.diagnostics.extend(out.items)


def _at(doc: Any, where: JsonPath) -> str:
    """The string at ``where`` in ``doc`` (a path substitution recorded, so it exists)."""
    node = doc
    for part in where:
        node = node[part]
    return str(node)


def _may_substitute(text: str) -> bool:
    """Whether a file's text can hold a ``$`` in any string (written, or escaped ``\\u0024``);
    a file without one is used as parsed, its walk skipped."""
    return "$" in text or "\\u0024" in text


def _substitution_text(code: str, token: str) -> tuple[str, str]:
    """Message and hint for a substitution problem (the token as written, never a value)."""
    if code == "env_var_missing":
        return (
            f"{token} has no value in the env file or the environment, and no default",
            f"define it in the .env file, export it, or write {token[:-1]}:-default}}.",
        )
    if code == "unterminated_substitution":
        return (
            f"'{token}' opens ${{ without closing it",
            "close the token with '}', or write $${ for a literal '${'.",
        )
    return (
        f"{token} is not a supported substitution",
        "use ${VAR} or ${VAR:-default}; write $${...} for a literal.",
    )


def cluster_of(root: Path, env_file: Path | None = None) -> ClusterConfig | None:
    """The ``cluster`` block of ``<root>/colony.json`` (``${VAR}`` resolved as at boot), for
    operator commands that read the colony's database: the cluster's when there is one. None
    without a block, or when colony.json cannot be read (the command then reads colony.db and
    says so if there is none; ``--validate`` names what is wrong)."""
    colony = colony_config_of(root, [], env_file)
    return None if colony is None else colony.cluster


def colony_config_of(
    root: Path, problems: list[Diagnostic], env_file: Path | None = None
) -> ColonyConfig | None:
    """``<root>/colony.json`` with ``${VAR}`` resolved as at boot (from ``env_file``, default
    ``<root>/.env``; an unreadable one counts as empty), for operator commands that need one
    of its blocks; what is wrong goes to ``problems``."""
    try:
        file_values = load_env_file(env_file if env_file is not None else root / ".env")
    except EnvFileError:
        file_values = {}
    return load_colony_config(root, problems, Variables(file_values))


def load_tree(
    root: Path,
    *,
    cell_types: Collection[str],
    env_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    engine: Engine | None = None,
    param_checks: Mapping[str, ParamsCheck] | None = None,
) -> LoadResult:
    """Load and check the colony tree under ``root``; read-only.

    ``cell_types`` are the non-hive types this daemon can run (the composition root passes
    ``cells.BUILTIN_CELL_TYPES``). ``env_file`` defaults to ``<root>/.env``. ``param_checks``
    validates each implemented type's ``params`` (and files in its folder).
    """
    diagnostics: list[Diagnostic] = []

    env_path = env_file if env_file is not None else root / ".env"
    file_values: dict[str, str] = {}
    try:
        file_values = load_env_file(env_path)
    except EnvFileError as exc:
        diagnostics.append(
            Diagnostic(
                Severity.ERROR,
                "env_file_invalid",
                f"the env file cannot be read: {exc.reason}",
                _relative(root, env_path),
                (),
                "write one KEY=VALUE per line; lines starting with # are comments."
                if exc.line is not None
                else "make it a regular text file of KEY=VALUE lines, or remove it.",
                exc.line,
                1 if exc.line is not None else None,
            )
        )
    variables = Variables(file_values, environ)

    colony = load_colony_config(root, diagnostics, variables)

    candidates = discovery.root_candidates(root, diagnostics)
    if len(candidates) != 1:
        diagnostics.append(_no_single_root(root, candidates))
        return LoadResult(None, diagnostics)
    if os.path.lexists(root / discovery.CONFIG_NAME):
        diagnostics.append(
            Diagnostic(
                Severity.WARNING,
                "root_is_a_node",
                f"{root} holds a config.json itself, as a node folder does; the colony root "
                "holds colony.json and one node folder",
                None,
                (),
                f"did you mean --root {_parent(root)}?",
            )
        )

    root_dir = candidates[0]
    loader = _TreeLoader(
        root, cell_types, variables, engine or default_engine(), param_checks or {}
    )
    with gc_paused():  # every object made here lives as long as the tree
        found = discovery.scan(root_dir, root)
        diagnostics.extend(found.findings)
        for node in found.nodes:
            loader.load_node(node)
        loader.check_endpoints({node.path for node in found.nodes})
        if not has_errors(loader.diagnostics) and not has_errors(diagnostics):
            # On a tree that loaded whole: a missing node would make findings up.
            loader.check_headers()
    diagnostics.extend(loader.diagnostics)

    if has_errors(diagnostics) or colony is None:
        return LoadResult(None, diagnostics)
    tree = ColonyTree(root, root_dir, colony, loader.cells, loader.hives, loader.edges)
    return LoadResult(tree, diagnostics)


def _parent(root: Path) -> str:
    """The folder above ``root``, written the way ``root`` was (relative stays relative)."""
    if root.is_absolute():
        return str(root.parent)
    return os.path.relpath(os.path.dirname(os.path.abspath(root)))


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link that loops
        return False


def _colony_roots_below(root: Path) -> list[str]:
    """Folders directly under ``root`` that are colony roots themselves (for a hint)."""
    out: list[str] = []
    try:
        with os.scandir(root) as entries:
            folders = sorted(
                os.path.normpath(e.path)
                for e in entries
                if not e.name.startswith(".") and _is_folder(e)
            )
    except OSError:
        return out
    for folder in folders:
        if len(discovery.root_candidates(Path(folder))) == 1:
            out.append(folder)
    return out


def _no_single_root(root: Path, candidates: list[Path]) -> Diagnostic:
    """No root node, or several: say so, and where the colony root probably is."""
    hint = ""
    if os.path.lexists(root / discovery.CONFIG_NAME):
        hint = f"did you mean --root {_parent(root)}? {root} looks like a node folder. "
    elif not candidates or len(candidates) > 1:
        below = _colony_roots_below(root)
        if len(below) == 1:
            hint = f"did you mean --root {below[0]}? "
        elif below:
            hint = f"did you mean one of --root {', '.join(below[:5])}? "
    if not candidates:
        return Diagnostic(
            Severity.ERROR,
            "no_root",
            f"no top-level folder under {root} holds a config.json, so the colony has no root node",
            None,
            (),
            hint + "otherwise create one folder (e.g. main/) with a config.json such as "
            '{"cell": {"type": "hive"}}; templates/, blobs/, .staging/ and dot-folders do '
            "not count.",
        )
    names = ", ".join(f"{c.name}/" for c in candidates)
    return Diagnostic(
        Severity.ERROR,
        "multiple_roots",
        f"{len(candidates)} top-level folders hold a config.json ({names}); a colony "
        "has exactly one root node",
        None,
        (),
        hint + "otherwise keep one root folder and move the others inside it (or under "
        "templates/).",
    )
