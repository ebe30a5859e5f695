"""Where a load run's answers land: the tree's ``/sink``, a cell that notes each one.

The sink is a cell of the tree (not the harness's capture cell) so that it can also write each
answer to a file before its ``handle`` returns: the journal acknowledges an answer only after
that, so a ``kill -9`` loses none, and an answer written but not yet acknowledged comes again
under the same message id (at-least-once), which the checks tell apart from a second answer.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from colony.cell import CellClass, CellSpec, CellType
from colony.envelope import Envelope

SINK_TYPE = "load_answers"

SINK_CONFIG = {
    "cell": {"type": SINK_TYPE},
    "description": "Notes every answer of a load run: its turn, its text, when (colony.load).",
    "contract": {"version": "1", "settings": {}, "consumes": {}},
}


@dataclass(frozen=True, slots=True)
class Answer:
    turn: str
    text: str | None
    message_id: str
    at: float
    """Wall-clock seconds (a run may span processes)."""


class AnswerLog:
    """Every answer of a run, in arrival order; with ``file``, also one JSON line each."""

    def __init__(self, file: Path | None = None) -> None:
        self.answers: list[Answer] = []
        self.file = file
        self.type = CellType(SINK_TYPE, CellClass.STATEFUL, self._cell)

    def _cell(self, spec: CellSpec) -> _Sink:
        return _Sink(self)

    def record(self, message: Envelope) -> None:
        turns = message.body.get("messages") if isinstance(message.body, dict) else None
        last = turns[-1] if isinstance(turns, list) and turns else {}
        text = last.get("text") if isinstance(last, dict) else None
        answer = Answer(
            turn=str(message.context.get("turn_id")),
            text=text if isinstance(text, str) else None,
            message_id=message.id,
            at=time.time(),
        )
        self.answers.append(answer)
        if self.file is not None:  # written before handle returns, so before the ack
            with self.file.open("a", encoding="utf-8") as out:
                out.write(json.dumps(asdict(answer)) + "\n")

    @classmethod
    def read(cls, file: Path) -> AnswerLog:
        """The answers a run wrote to ``file`` (a torn last line, cut by a kill, is skipped:
        its message was not acknowledged and comes again)."""
        log = cls()
        with contextlib.suppress(FileNotFoundError):
            for line in file.read_text(encoding="utf-8").splitlines():
                try:
                    doc: dict[str, Any] = json.loads(line)
                except ValueError:
                    continue
                log.answers.append(Answer(**doc))
        return log


class _Sink:
    def __init__(self, log: AnswerLog) -> None:
        self._log = log

    async def handle(self, message: Envelope) -> None:
        self._log.record(message)


def write_answer_tree(source: Path, dest: Path) -> Path:
    """A copy of ``source`` whose ``/sink`` is an :class:`AnswerLog` cell; returns ``dest``."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("*.db", "*.db-*", "*.jsonl"))
    sink = dest / "main" / "sink"
    sink.mkdir()
    (sink / "config.json").write_text(json.dumps(SINK_CONFIG, indent=2), encoding="utf-8")
    return dest


@contextlib.contextmanager
def answer_tree(source: Path) -> Iterator[Path]:
    """:func:`write_answer_tree` into a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="colony-load-tree-") as tmp:
        yield write_answer_tree(source, Path(tmp) / "tree")
