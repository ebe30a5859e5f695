"""Store operations: arguments in, one SQL statement and its bound values out.

Pure: no connection here. Every table and column name is checked — first that it is an
identifier, then that the schema declares it — before it is quoted into SQL, and every value
is a bound parameter. The SQL is spelt by a :class:`~cells.store.dialect.StoreDialect` (SQLite's
unless told), which also turns each value into what that database stores or compares. A
malformed call is :class:`ArgsError` (``invalid_input``); a name the schema lacks is
:class:`UnknownNameError` (``unknown_table`` / ``unknown_column``, reported like an SQL
error). The shape of a call is judged before any name is looked up, so whether a call is
well formed never depends on the schema (``select`` with ``columns: []`` is ``invalid_input``
on any table, existing or not).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cells.store.dialect import SQLITE, StoreDialect
from cells.store.params import COLUMN_KINDS, identifier_problem
from colony.jsonwire import JsonRefused, loads

Schema = Mapping[str, Mapping[str, str]]

KNOWN_ARGS: dict[str, tuple[str, ...]] = {
    "insert": ("row",),
    "select": ("columns", "where", "order_by", "limit", "distinct"),
    "update": ("set", "where"),
    "delete": ("where",),
    "create_table": ("columns",),
}
_ALLOWED = {op: frozenset(("operation", "table", *known)) for op, known in KNOWN_ARGS.items()}
WRITES = frozenset({"insert", "update", "delete", "create_table"})
_COMPARISONS = {"eq": "=", "neq": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


class ArgsError(Exception):
    """The call is malformed (``invalid_input``)."""

    def __init__(self, operation: str, text: str) -> None:
        self.operation = operation
        self.text = text
        super().__init__(text)


class UnknownNameError(Exception):
    """A table or column the schema does not declare."""

    def __init__(self, code: str, text: str) -> None:
        self.code = code
        self.text = text
        super().__init__(text)


@dataclass(slots=True)
class Plan:
    operation: str
    table: str
    sql: str
    values: list[Any] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    """For a select: the keys of each returned row."""
    new_columns: dict[str, str] = field(default_factory=dict)
    """For create_table: the columns it declares."""
    keys: tuple[str, ...] = ()
    """The columns its ``where`` pins to one value or a list (``=``, ``eq``, ``in``), sorted:
    what an index would look rows up by."""


def parse_call(messages: Any) -> tuple[str, dict[str, Any]]:
    """``(call id, args)`` from ``body.messages``: the first turn must be a tool_call whose
    text is a JSON object."""
    call_id, text = call_text(messages)
    return call_id, parse_args(text)


def call_text(messages: Any) -> tuple[str, str]:
    """``(call id, text)`` of the tool_call ``body.messages`` starts with, text not yet read
    (a store keeps the plans of texts it has seen: :class:`Plans`)."""
    if not isinstance(messages, list) or not messages:
        raise ArgsError("error", "the body needs messages[0], a tool_call carrying the operation")
    turn = messages[0]
    if not isinstance(turn, dict) or turn.get("type") != "tool_call":
        raise ArgsError("error", "messages[0] must be a tool_call turn")
    call_id = turn.get("id")
    text = turn.get("text")
    if not isinstance(text, str):
        raise ArgsError("error", "the tool_call text is not JSON (it is not a string)")
    return call_id if isinstance(call_id, str) else "", text


def parse_args(text: str) -> dict[str, Any]:
    """The arguments a tool_call's text holds: a JSON object."""
    try:
        args = loads(text)
    except JsonRefused as exc:
        raise ArgsError("error", f"the tool_call text is not JSON: {exc.problem}") from None
    if not isinstance(args, dict):
        raise ArgsError("error", "the tool_call text must be a JSON object")
    return args


class Plans:
    """The plans of call texts a store has planned, so a call seen again (a conversation
    selecting its thread after every write) is neither read nor checked again.

    Only a plan that succeeded is kept: the schema only ever grows, so a call that planned
    once plans the same way later, while one naming an unknown table may not. Bounded in
    entries and in text length; the oldest entry goes first."""

    KEPT = 256
    TEXT_MAX = 2048

    def __init__(self) -> None:
        self._plans: dict[str, Plan] = {}

    def get(self, text: str) -> Plan | None:
        return self._plans.get(text)

    def clear(self) -> None:
        """Forget every plan (the schema changed: a new column may shadow the rowid)."""
        self._plans.clear()

    def keep(self, text: str, step: Plan) -> None:
        if len(text) > self.TEXT_MAX:
            return
        if len(self._plans) >= self.KEPT:
            del self._plans[next(iter(self._plans))]
        self._plans[text] = step


def _table(operation: str, args: dict[str, Any], schema: Schema) -> str:
    table = args.get("table")
    problem = identifier_problem(table)
    if problem:
        raise ArgsError(operation, f"{operation}: table {problem}")
    assert isinstance(table, str)
    if table not in schema:
        raise UnknownNameError("unknown_table", f"no such table: {table}")
    return table


def _column(operation: str, table: str, name: Any, schema: Schema) -> str:
    problem = identifier_problem(name)
    if problem:
        raise ArgsError(operation, f"{operation}: column {problem}")
    assert isinstance(name, str)
    if name not in schema[table]:
        raise UnknownNameError("unknown_column", f"table {table} has no column named {name}")
    return name


def _listed(columns: Iterable[str]) -> str:
    """Checked column names, quoted and comma-separated (an identifier holds no quote)."""
    return '"' + '", "'.join(columns) + '"'


@dataclass(frozen=True, slots=True)
class _Site:
    """Where a call's values go: the dialect that binds them, the table's columns."""

    dialect: StoreDialect
    columns: Mapping[str, Any]

    def compared(self, operation: str, column: str, value: Any, what: str) -> Any:
        if isinstance(value, dict | list):
            raise ArgsError(operation, f"{operation}: {what} must be a scalar")
        return self.dialect.value(self.columns.get(column), column, value, stored=False)

    def stored(self, column: str, value: Any) -> Any:
        return self.dialect.value(self.columns.get(column), column, value, stored=True)


def _comparison(operation: str, column: str, spec: Any, site: _Site) -> tuple[str, list[Any]]:
    mark = site.dialect.mark
    if not isinstance(spec, dict):
        return f'"{column}" = {mark}', [site.compared(operation, column, spec, f"where.{column}")]
    if len(spec) != 1:
        raise ArgsError(operation, f"{operation}: where.{column} must hold exactly one operator")
    ((op, value),) = spec.items()
    if op in _COMPARISONS:
        return f'"{column}" {_COMPARISONS[op]} {mark}', [
            site.compared(operation, column, value, f"where.{column}.{op}")
        ]
    if op == "in":
        if not isinstance(value, list) or not value:
            raise ArgsError(operation, f"{operation}: where.{column}.in must be a non-empty array")
        marks = ", ".join([mark] * len(value))
        return f'"{column}" IN ({marks})', [
            site.compared(operation, column, v, f"where.{column}.in") for v in value
        ]
    if op == "is_null":
        if not isinstance(value, bool):
            raise ArgsError(operation, f"{operation}: where.{column}.is_null must be true or false")
        return f'"{column}" IS {"" if value else "NOT "}NULL', []
    raise ArgsError(
        operation,
        f"{operation}: unknown operator {op!r} in where.{column} "
        f"(known: {', '.join([*_COMPARISONS, 'in', 'is_null', 'or_null'])})",
    )


def _where(
    operation: str, table: str, where: Any, schema: Schema, site: _Site
) -> tuple[str, list[Any], tuple[str, ...]]:
    """The WHERE clause, its values, and its key columns (see :attr:`Plan.keys`)."""
    if where is None:
        return "", [], ()
    if not isinstance(where, dict):
        raise ArgsError(operation, f"{operation}: where must be an object")
    clauses: list[str] = []
    values: list[Any] = []
    keys: list[str] = []
    for name, spec in where.items():
        column = _column(operation, table, name, schema)
        if isinstance(spec, dict) and list(spec) == ["or_null"]:
            inner, bound = _comparison(operation, column, spec["or_null"], site)
            clauses.append(f'({inner} OR "{column}" IS NULL)')
        else:
            inner, bound = _comparison(operation, column, spec, site)
            clauses.append(inner)
            if not isinstance(spec, dict) or list(spec) in (["eq"], ["in"]):
                keys.append(column)
        values.extend(bound)
    if not clauses:
        return "", [], ()
    return " WHERE " + " AND ".join(clauses), values, tuple(sorted(set(keys)))


def _row(
    operation: str, table: str, row: Any, key: str, schema: Schema, site: _Site
) -> dict[str, Any]:
    if not isinstance(row, dict) or not row:
        raise ArgsError(operation, f"{operation}: {key} must be a non-empty object")
    return {
        column: site.stored(column, value)
        for column, value in ((_column(operation, table, n, schema), v) for n, v in row.items())
    }


class _Everything(Mapping[str, Any]):
    """A schema in which every table and every column exists: planning against it finds
    every :class:`ArgsError` of a call and no :class:`UnknownNameError`."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        return self

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_ANY_SCHEMA = _Everything()


def plan(
    args: dict[str, Any], schema: Schema, prefix: str = "", dialect: StoreDialect = SQLITE
) -> Plan:
    """The statement for one call (see the module docstring for the two error families);
    ``prefix`` goes before the table's name in the SQL (the cell's namespace in colony.db),
    ``dialect`` spells it.

    Planned against ``schema``; a call naming an unknown table or column is planned again
    against a schema holding every name, so a malformed call is ``invalid_input`` whatever it
    names (``schema`` can only add an unknown table or column to what that pass finds).
    """
    try:
        return _plan(args, schema, prefix, dialect)
    except UnknownNameError:
        # The unknown name may come before a malformed part: that one wins (invalid_input).
        _plan(args, _ANY_SCHEMA, prefix, dialect)
        raise


def _plan(args: dict[str, Any], schema: Schema, prefix: str, dialect: StoreDialect) -> Plan:
    operation = args.get("operation")
    if not isinstance(operation, str) or operation not in KNOWN_ARGS:
        raise ArgsError(
            "error",
            f"unknown operation {operation!r} (known: {', '.join(KNOWN_ARGS)})",
        )
    known = KNOWN_ARGS[operation]
    allowed = _ALLOWED[operation]
    for key in args:
        if key not in allowed:
            raise ArgsError(
                operation,
                f'{operation}: unknown argument "{key}" '
                f"(known: operation, table, {', '.join(known)})",
            )
    if operation == "create_table":
        return _create_table(args, schema)
    table = _table(operation, args, schema)
    name = dialect.table(prefix, table)
    site = _Site(dialect, schema[table])
    mark = dialect.mark
    if operation == "insert":
        row = _row(operation, table, args.get("row"), "row", schema, site)
        names = _listed(row)
        marks = ", ".join([mark] * len(row))
        return Plan(
            operation,
            table,
            f"INSERT INTO {name} ({names}) VALUES ({marks})",
            list(row.values()),
        )
    if operation == "update":
        changes = _row(operation, table, args.get("set"), "set", schema, site)
        where, bound, keys = _where(operation, table, args.get("where"), schema, site)
        sets = '"' + f'" = {mark}, "'.join(changes) + f'" = {mark}'
        return Plan(
            operation,
            table,
            f"UPDATE {name} SET {sets}{where}",
            [*changes.values(), *bound],
            keys=keys,
        )
    if operation == "delete":
        where, bound, keys = _where(operation, table, args.get("where"), schema, site)
        return Plan(operation, table, f"DELETE FROM {name}{where}", bound, keys=keys)
    return _select(args, table, schema, name, site)


def _select(args: dict[str, Any], table: str, schema: Schema, name: str, site: _Site) -> Plan:
    op = "select"
    columns = args.get("columns")
    if not isinstance(columns, list) or not columns:
        raise ArgsError(op, "select: columns is required (a non-empty array of column names)")
    names = [_column(op, table, c, schema) for c in columns]
    where, values, keys = _where(op, table, args.get("where"), schema, site)
    distinct = args.get("distinct") is True
    if "distinct" in args and not isinstance(args["distinct"], bool):
        raise ArgsError(op, "select: distinct must be true or false")
    order: list[tuple[str, str]] = []
    order_by = args.get("order_by")
    if order_by is not None:
        if not isinstance(order_by, list):
            raise ArgsError(op, "select: order_by must be an array of {col, dir}")
        for entry in order_by:
            if not isinstance(entry, dict) or set(entry) - {"col", "dir"} or "col" not in entry:
                raise ArgsError(op, "select: each order_by entry is {col, dir?}")
            column = _column(op, table, entry["col"], schema)
            direction = entry.get("dir", "asc")
            if direction not in ("asc", "desc"):
                raise ArgsError(op, "select: order_by dir must be asc or desc")
            order.append((column, direction))
    limit = args.get("limit")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ArgsError(op, "select: limit must be an integer >= 1")
        values.append(site.dialect.value(None, None, limit, stored=False))
    # Rows come in the order they were written, whatever index the store made
    # (StoreCell._index): the dialect breaks every tie by write order.
    sql = site.dialect.select(
        name,
        names,
        where,
        order,
        distinct=distinct,
        table_columns=schema.get(table, {}),
        limit=limit is not None,
    )
    return Plan(op, table, sql, values, names, keys=keys)


def _create_table(args: dict[str, Any], schema: Schema) -> Plan:
    op = "create_table"
    table = args.get("table")
    problem = identifier_problem(table)
    if problem:
        raise ArgsError(op, f"{op}: table {problem}")
    assert isinstance(table, str)
    columns = args.get("columns")
    if not isinstance(columns, dict) or not columns:
        raise ArgsError(op, f"{op}: columns must be a non-empty map of column: type")
    for name, kind in columns.items():
        problem = identifier_problem(name)
        if problem:
            raise ArgsError(op, f"{op}: column {problem}")
        if kind not in COLUMN_KINDS:
            raise ArgsError(op, f"{op}: column {name!r} has type {kind!r}; use text, int or json")
    return Plan(op, table, "", new_columns=dict(columns))
