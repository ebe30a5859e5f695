"""``meclaw trace``: a trace's hops as a tree, each with what became of it.

A hop (a message-log row) sits under the hop of the message it came from and shows its route,
the TTL it had left, when routing took it (milliseconds after the trace's first hop), and, from
the ``handling`` table, how long the cell it went to took and with what outcome (for an LLM
call: model, latency, tokens). Failures are marked ``✗`` in red where they happened: the error
a cell failed with, a dead letter on the hop it died on, or, for a message that died before it
became a hop (an emission no edge took, a path that does not exist), under the hop it came from.

The rows come as dicts, in the shape ``GET /colony/trace`` answers with (:class:`TraceRecord`),
so the drawing is pure and is tested on rows written by hand; :func:`read_trace` reads them
from a colony's database. A database written before the ``handling`` table existed has no
durations: the hops are drawn without them.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from colony.failures import error_code, error_text, one_line
from colony.persist.records import DeadLetterRow, read_trace_dead_letters
from colony.persist.source import Source
from colony.queries import LIMIT_MAX, TraceFilters
from colony.reads import select_trace
from colony.runs import select_handling
from colony.watch import OUTCOME_STYLES, tokens

Row = Mapping[str, Any]

HOP_FIELDS = 4
"""How many of a hop's ``hop`` header fields its line shows."""
PLAIN_WIDTH = 100_000
"""The width plain text is drawn at: wide enough that no line wraps."""


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """What is drawn: the rows of one trace, oldest first."""

    trace_id: str
    hops: Sequence[Row]
    """Message-log rows: id, parent_message_id, from_path, to_path, ttl, headers, body, at_ms,
    edges."""
    handling: Sequence[Row] = ()
    """Rows of the ``handling`` table: message_id, cell, duration_ms, outcome, error, model,
    llm_latency_ms, tokens_prompt, tokens_completion."""
    dead_letters: Sequence[Row] = ()
    """Dead-letter listing fields; ``message`` (the stored envelope as JSON) when it was read:
    it says which message a letter that never became a hop came from."""
    truncated: bool = False
    """The trace has more hops than were read."""

    @property
    def empty(self) -> bool:
        return not self.hops and not self.dead_letters and not self.handling


# -- reading ------------------------------------------------------------------------------------


def read_trace(source: Source, trace_id: str) -> TraceRecord:
    """The rows of ``trace_id`` from a colony's database (read-only; no daemon needed)."""
    # Built without validation: a trace id is whatever string a client gave, not only a UUID.
    filters = TraceFilters.model_construct(trace_id=trace_id, limit=LIMIT_MAX)
    hops = select_trace(source, filters)
    letters = [_letter_fields(letter) for letter in read_trace_dead_letters(source, trace_id)]
    return TraceRecord(
        trace_id,
        hops,
        select_handling(source, trace_id),  # none from a database older than the table
        letters,
        truncated=len(hops) >= LIMIT_MAX,
    )


def _letter_fields(letter: DeadLetterRow) -> dict[str, Any]:
    fields = letter.fields()
    # Deleted since it was listed, or unreadable: then placed by its message id alone.
    with contextlib.suppress(LookupError, ValueError, KeyError, TypeError):
        fields["message"] = letter.message.to_json()
    return fields


# -- drawing ------------------------------------------------------------------------------------


def trace_tree(record: TraceRecord) -> Tree:
    """The hop tree of ``record``."""
    return _Drawing(record).tree()


def plain_lines(tree: Tree) -> list[str]:
    """``tree`` as lines of text without colour (for pipes, files and tests)."""
    out = io.StringIO()
    console = Console(file=out, width=PLAIN_WIDTH, no_color=True, highlight=False)
    console.print(tree)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def trace_lines(db: Source, trace_id: str) -> list[str]:
    """The hop tree of ``trace_id`` as plain lines; empty when the trace left no rows."""
    record = read_trace(db, trace_id)
    return [] if record.empty else plain_lines(trace_tree(record))


def trace_json(record: TraceRecord) -> str:
    """``record`` as one JSON object, in the shape of ``GET /colony/trace``."""
    letters = [{k: v for k, v in r.items() if k != "message"} for r in record.dead_letters]
    doc = {"trace": list(record.hops), "handling": list(record.handling), "dead_letters": letters}
    return json.dumps(doc, ensure_ascii=False, default=str)


class _Drawing:
    """One drawing of a record: the indexes the tree is built from."""

    def __init__(self, record: TraceRecord) -> None:
        self.record = record
        ids = {str(h.get("id")) for h in record.hops}
        self.children: dict[str | None, list[Row]] = {}
        for hop in record.hops:
            parent = hop.get("parent_message_id")
            self.children.setdefault(parent if parent in ids else None, []).append(hop)
        self.handled: dict[tuple[str, str], list[Row]] = {}
        self.unmatched: list[Row] = []
        hop_cells = {(str(h.get("id")), str(h.get("to_path"))) for h in record.hops}
        for row in record.handling:
            key = (str(row.get("message_id")), str(row.get("cell")))
            if key in hop_cells:
                self.handled.setdefault(key, []).append(row)
            else:
                self.unmatched.append(row)
        self.died_at: dict[str, list[Row]] = {}
        self.letters_under: dict[str | None, list[Row]] = {}
        for letter in record.dead_letters:
            message = letter.get("message")
            message_id = letter.get("message_id") or (message or {}).get("id")
            if message_id in ids:
                self.died_at.setdefault(str(message_id), []).append(letter)
                continue
            parent = (message or {}).get("parent_message_id")
            self.letters_under.setdefault(parent if parent in ids else None, []).append(letter)
        self.start = _start_ms(record)

    def tree(self) -> Tree:
        tree = Tree(self._title())
        self._walk(tree, None)
        for row in self.unmatched:
            message = str(row.get("message_id"))[-8:]
            line = Text(f"{row.get('cell', '?')} handled message …{message}")
            line.append(" (no logged hop)", style="dim")
            line.append_text(self._handling(row))
            tree.add(line)
            self._handling_error(tree, row)
        if self.record.truncated:
            tree.add(Text(f"… only the first {len(self.record.hops)} hops are shown", "dim"))
        return tree

    def _title(self) -> Text:
        record = self.record
        title = Text(f"trace {record.trace_id}", style="bold")
        facts = [f"{len(record.hops)} hop" + ("" if len(record.hops) == 1 else "s")]
        span = _span_ms(record, self.start)
        if span is not None:
            facts.append(f"{span} ms")
        if record.dead_letters:
            n = len(record.dead_letters)
            facts.append(f"{n} dead letter" + ("" if n == 1 else "s"))
        title.append("  " + " · ".join(facts), style="dim")
        return title

    def _walk(self, node: Tree, parent: str | None) -> None:
        for hop in self.children.get(parent, []):
            hop_id = str(hop.get("id"))
            handled = self.handled.get((hop_id, str(hop.get("to_path"))), [])
            child = node.add(self._hop_label(hop, handled[-1] if handled else None))
            for earlier in handled[:-1]:  # a cell that crashed and took the message again
                line = Text("earlier:")
                line.append_text(self._handling(earlier))
                child.add(line)
            for row in handled:
                self._handling_error(child, row)
            if not self._parent_showed_error(hop):
                self._emission_error(child, hop.get("headers"), hop.get("body"))
            for letter in self.died_at.get(hop_id, []):
                child.add(Text(f"✗ died here: {_died(letter)}", style="bold red"))
            self._walk(child, hop_id)
        for letter in self.letters_under.get(parent, []):
            message = letter.get("message") or {}
            line = Text(
                f"✗ {letter.get('sender_path', '?')} → {letter.get('original_target', '?')}  "
                f"{_died(letter)}",
                style="bold red",
            )
            body = message.get("body_payload")
            self._emission_error(node.add(line), message.get("headers"), body)

    def _hop_label(self, hop: Row, handling: Row | None) -> Text:
        label = Text(f"{hop.get('from_path', '?')} → {hop.get('to_path', '?')}")
        label.append(f"  ttl {hop.get('ttl', '?')}")
        at = hop.get("at_ms")
        if isinstance(at, int) and self.start is not None:
            label.append(f"  +{at - self.start} ms", style="dim")
        fields = _hop_fields(hop.get("headers"))
        if fields:
            label.append(f"  [{fields}]", style="dim")
        edges = hop.get("edges")
        if isinstance(edges, list) and edges:
            label.append(f"  fired {','.join(str(e) for e in edges)}", style="dim")
        if handling is not None:
            label.append_text(self._handling(handling))
        return label

    @staticmethod
    def _handling(row: Row) -> Text:
        """``  ·  took N ms · outcome[ · model · latency · tokens]``."""
        outcome = str(row.get("outcome") or "?")
        text = Text("  ·  ")
        took = row.get("duration_ms")
        text.append(f"took {took if took is not None else '?'} ms · ")
        text.append(outcome, style=OUTCOME_STYLES.get(outcome, ""))
        llm = [str(row["model"])] if row.get("model") else []
        if row.get("llm_latency_ms") is not None:
            llm.append(f"{row['llm_latency_ms']} ms")
        counted = tokens(row.get("tokens_prompt"), row.get("tokens_completion"))
        if counted:
            llm.append(counted)
        if llm:
            text.append(" · " + " · ".join(llm), style="magenta")
        return text

    @staticmethod
    def _handling_error(node: Tree, row: Row) -> None:
        outcome = str(row.get("outcome") or "")
        if outcome != "ok" and row.get("error"):
            # An error row's text starts with its code: ``✗ error script_failed: ValueError…``.
            sep = " " if outcome == "error" else ": "
            node.add(Text(f"✗ {outcome}{sep}{one_line(str(row['error']))}", style="red"))

    def _parent_showed_error(self, hop: Row) -> bool:
        """Whether the handling that emitted ``hop`` already showed its error (a cell that
        failed answers with an error emission carrying the same text)."""
        key = (str(hop.get("parent_message_id")), str(hop.get("from_path")))
        return any(r.get("error") and r.get("outcome") != "ok" for r in self.handled.get(key, []))

    @staticmethod
    def _emission_error(node: Tree, headers: Any, body: Any) -> None:
        hop = headers.get("hop") if isinstance(headers, dict) else None
        code = error_code(hop)
        if code is None:
            return
        text = one_line(error_text(body)) or "(the emission carries no error text)"
        node.add(Text(f"✗ error {code}: {text}", style="red"))


def _died(letter: Row) -> str:
    detail = letter.get("detail")
    why = f": {detail}" if detail else ""
    return f"dead letter #{letter.get('id', '?')} {letter.get('error_code', '?')}{why}"


def _hop_fields(headers: Any) -> str:
    hop = headers.get("hop") if isinstance(headers, dict) else None
    if not isinstance(hop, dict):
        return ""
    return ", ".join(f"{k}={_short(v)}" for k, v in list(hop.items())[:HOP_FIELDS])


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 24 else text[:21] + "…"


def _start_ms(record: TraceRecord) -> int | None:
    """When the trace started: its first routing decision (else its first handling)."""
    times = _at(record.hops, "at_ms") or _at(record.handling, "started_ms")
    return min(times) if times else None


def _at(rows: Sequence[Row], column: str) -> list[int]:
    """The integer values of ``column`` in ``rows`` (NULLs of an older database left out)."""
    return [int(r[column]) for r in rows if isinstance(r.get(column), int)]


def _span_ms(record: TraceRecord, start: int | None) -> int | None:
    """From the trace's start to its last recorded moment."""
    if start is None:
        return None
    ends = _at(record.hops, "at_ms")
    for row in record.handling:
        begun, took = row.get("started_ms"), row.get("duration_ms")
        if isinstance(begun, int) and isinstance(took, int):
            ends.append(begun + took)
    return max(ends) - start
