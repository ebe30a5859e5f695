"""``params`` of a ``store`` cell, and its seed files."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from colony.cell import ParamProblem
from colony.config import reading
from colony.config.schema_errors import shown

ColumnType = Literal["text", "int", "json"]
COLUMN_KINDS = frozenset(get_args(ColumnType))
"""The column types a schema may name (each database's SQL type: :mod:`cells.store.dialect`)."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def identifier_problem(name: Any) -> str | None:
    """Why ``name`` may not name a table or column, or None. Names go into SQL (quoted), so
    only this shape is ever accepted."""
    if isinstance(name, str) and name in _GOOD_NAMES:
        return None  # every operation names the same few tables and columns again
    problem = _identifier_problem(name)
    if problem is None and len(_GOOD_NAMES) < _GOOD_NAMES_KEPT:
        _GOOD_NAMES.add(name)
    return problem


_GOOD_NAMES: set[str] = set()
"""Names already found good (bounded: a store's names are few, a caller's typos are not kept)."""
_GOOD_NAMES_KEPT = 4096


def _identifier_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        return f"{shown(name)} is not an identifier ([A-Za-z_][A-Za-z0-9_]{{0,62}})"
    if name.lower().startswith("sqlite_"):
        return f"{shown(name)} starts with sqlite_, which SQLite reserves"
    if name.lower().endswith("_fts"):
        return f"{shown(name)} ends with _fts, which full-text tables reserve"
    return None


class StoreParams(BaseModel):
    # meclaw's parser skips keys it does not read; the loader warns about each.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    schema_: dict[str, dict[str, ColumnType]] = Field(alias="schema")
    """``{table: {column: "text" | "int" | "json"}}``: created on a fresh database; missing
    columns are added later, nothing is ever dropped."""
    query_timeout_ms: Annotated[int, Field(ge=1)] | None = None
    """An operation running longer is interrupted (``query_timeout``); none = unbounded."""
    write_surface: Literal["open", "internal"] = "open"
    """``internal``: only cells inside the store's own hive may write."""
    fts: dict[str, list[str]] = Field(default_factory=dict)
    """Accepted for meclaw trees; full-text search is not implemented here."""
    canonical: dict[str, Any] = Field(default_factory=dict)
    """Accepted for meclaw trees; canonical identities are not implemented here."""

    @field_validator("schema_")
    @classmethod
    def _tables(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        if not value:
            raise PydanticCustomError("empty_schema", "schema declares no table")
        for table, columns in value.items():
            problem = identifier_problem(table)
            if problem:
                raise PydanticCustomError("invalid_identifier", "table {p}", {"p": problem})
            if not columns:
                raise PydanticCustomError(
                    "empty_table", "table '{t}' declares no column", {"t": table}
                )
            for column in columns:
                problem = identifier_problem(column)
                if problem:
                    raise PydanticCustomError(
                        "invalid_identifier", "column of '{t}': {p}", {"t": table, "p": problem}
                    )
        return value


class StoreSeedError(Exception):
    """A seed file is malformed; the message names the line."""


def read_seed(file: Path, columns: Mapping[str, str]) -> list[dict[str, Any]]:
    """Rows of ``seed/<table>.jsonl``: a ``{"schema": {...}}`` header naming every declared
    column, then one JSON object per line (blank lines skipped). The file must be a regular
    file of at most :data:`~colony.config.reading.MAX_SEED_BYTES`."""
    rows: list[dict[str, Any]] = []
    header_seen = False
    try:
        for number, value in reading.jsonl(file):
            if not header_seen:
                if not isinstance(value, dict) or not isinstance(value.get("schema"), dict):
                    raise StoreSeedError(
                        f'line {number}: the first line must be {{"schema": {{...}}}}'
                    )
                missing = sorted(set(columns) - set(value["schema"]))
                if missing:
                    raise StoreSeedError(
                        f"line {number}: the header lacks declared column(s) {', '.join(missing)}"
                    )
                header_seen = True
                continue
            if not isinstance(value, dict):
                raise StoreSeedError(f"line {number}: a row must be a JSON object")
            rows.append(value)
    except reading.ReadProblem as problem:
        raise StoreSeedError(problem.message) from None
    if not header_seen:
        raise StoreSeedError('the file is empty; it needs a {"schema": {...}} header line')
    return rows


def check_folder(params: StoreParams, folder: Path | None) -> list[ParamProblem]:
    """Seed files parse (so a broken seed fails ``--validate``, not the first message)."""
    if folder is None:
        return []
    problems: list[ParamProblem] = []
    for table, columns in params.schema_.items():
        file = folder / "seed" / f"{table}.jsonl"
        if not os.path.lexists(file):
            continue
        try:
            read_seed(file, columns)
        except StoreSeedError as exc:
            problems.append(
                ParamProblem(
                    ("schema", table),
                    "invalid_seed",
                    f"seed/{table}.jsonl: {exc}",
                    "fix the seed file (header line, then one JSON row per line).",
                )
            )
    return problems
