"""The one observer of committed hand-offs that metrics need (:attr:`colony.events.Events.taps`).

Per hand-off it costs, when a cell's handling caused it, one dict lookup and a
:meth:`~colony.metrics.tally.Tally.add` (its duration); a failed handling, a dead letter or an
LLM call adds a couple of dict updates more. Nothing is built per call: each cell's tallies are
made the first time the cell is seen, and Prometheus families only at scrape
(:mod:`colony.metrics.collector`). Deliveries and decisions are not counted here at all: the
mailboxes and the colony count them already.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from colony.dead_letters import DeadLetter
from colony.effects import Effects, Handled
from colony.metrics.tally import Tally

HANDLING_MS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 120_000)
"""Bounds of the handling-duration histogram, in milliseconds (exposed in seconds)."""

WAIT_MS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 30_000, 60_000, 300_000)
"""Bounds of the mailbox-wait histogram, in milliseconds (exposed in seconds)."""

LLM_MS = (100, 250, 500, 1000, 2000, 5000, 10_000, 20_000, 30_000, 60_000, 120_000)
"""Bounds of the LLM-latency histogram, in milliseconds (exposed in seconds)."""

MODELS = 32
"""Distinct models counted per provider; later ones are counted as ``other`` (a message may
set a cell's model at runtime, so the values are not the tree's alone)."""

OTHER = "other"
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class LlmLabels:
    """What an LLM cell is configured with: its labels when a call does not say."""

    provider: str
    model: str | None = None


class CellTally:
    """One cell's handling times and how its handlings ended."""

    __slots__ = ("failed", "handling", "llm", "wait")

    def __init__(self, llm: LlmLabels | None) -> None:
        self.handling = Tally(HANDLING_MS)
        self.wait = Tally(WAIT_MS)
        """From a message's making to the start of its handling: its time in the mailbox
        (and in its journal backlog, or across a restart, when it was redelivered)."""
        self.failed: dict[str, int] = {}
        """Handlings that did not end ``ok``, by outcome (``ok`` = the rest)."""
        self.llm = llm


class LlmTally:
    """The calls of one provider and model."""

    __slots__ = ("calls", "completion", "errors", "latency", "prompt")

    def __init__(self) -> None:
        self.calls = 0
        self.errors = 0
        self.prompt = 0
        self.completion = 0
        self.latency = Tally(LLM_MS)


def made_ms(message_id: str) -> int | None:
    """The millisecond a message was made: the first 48 bits of its UUID v7 id
    (:mod:`colony.ids`); None for an id of another form (a test's, a foreign one)."""
    if len(message_id) != 36 or message_id[14] != "7":
        return None
    try:
        return int(message_id[:8] + message_id[9:13], 16)
    except ValueError:
        return None


class HandoffTap:
    """Counts what each committed hand-off tells (register :meth:`observe` in ``events.taps``).

    ``known`` says whether a path is one of the colony's cells or hives: a dead letter is
    counted under the cell where it died, its resolved target when that is a node of the tree,
    else its sender when that is one, else ``""`` (a message sent to a path that does not
    exist never becomes a label). ``llm`` maps an LLM cell's path to its provider and model."""

    def __init__(self, known: Callable[[str], bool], llm: Mapping[str, LlmLabels]) -> None:
        self._known = known
        self.llm_cells = dict(llm)
        self.cells: dict[str, CellTally] = {}
        self.letters: dict[tuple[str, str], int] = {}
        """Dead letters by (code, cell)."""
        self.calls: dict[tuple[str, str], LlmTally] = {}
        """LLM calls by (provider, model)."""
        self._models: dict[str, set[str]] = {}
        self.owner: object = None
        """Who registered this tap (how :func:`colony.metrics.registry.metrics_of` finds it)."""

    def observe(self, fx: Effects) -> None:
        """The tap (register this bound method: it is called on every hand-off)."""
        handled = fx.handled
        if handled is not None:
            cell = self.cells.get(handled.cell)
            if cell is None:
                cell = self.cells[handled.cell] = CellTally(self.llm_cells.get(handled.cell))
            ms = handled.duration_ms
            tally = cell.handling  # Tally.add, inlined: this runs for every handling
            tally.counts[bisect_left(HANDLING_MS, ms)] += 1
            tally.total += ms
            made = made_ms(handled.message_id)
            if made is not None:
                waited = max(0, handled.started_ms - made)
                tally = cell.wait
                tally.counts[bisect_left(WAIT_MS, waited)] += 1
                tally.total += waited
            if handled.outcome != "ok" or handled.model is not None or cell.llm is not None:
                self._rare(handled, cell)
        if fx.letters:
            self._letters(fx.letters)

    def _rare(self, handled: Handled, cell: CellTally) -> None:
        """A failed handling, or one of an LLM cell or with an LLM call."""
        outcome = handled.outcome
        if outcome != "ok":
            cell.failed[outcome] = cell.failed.get(outcome, 0) + 1
        if handled.model is not None or (cell.llm is not None and outcome != "ok"):
            self._call(handled, cell.llm)

    def describe_llm(self, path: str, cell: LlmLabels) -> None:
        """Name an LLM cell's provider and model (before traffic, or its cell's later calls)."""
        self.llm_cells[path] = cell
        tally = self.cells.get(path)
        if tally is not None:
            tally.llm = cell

    def _call(self, handled: Handled, cell: LlmLabels | None) -> None:
        provider = cell.provider if cell is not None else UNKNOWN
        model = handled.model or (cell.model if cell is not None else None) or UNKNOWN
        tally = self.calls.get((provider, model))
        if tally is None:
            seen = self._models.setdefault(provider, set())
            if model not in seen and len(seen) >= MODELS:
                model = OTHER
            else:
                seen.add(model)
            tally = self.calls.get((provider, model))
            if tally is None:
                tally = self.calls[(provider, model)] = LlmTally()
        tally.calls += 1
        if handled.outcome != "ok":
            tally.errors += 1
        if handled.llm_latency_ms is not None:
            tally.latency.add(handled.llm_latency_ms)
        tally.prompt += handled.tokens_prompt or 0
        tally.completion += handled.tokens_completion or 0

    def _letters(self, letters: Iterable[DeadLetter]) -> None:
        known = self._known
        counts = self.letters
        for letter in letters:
            if known(letter.resolved_target):
                cell = letter.resolved_target
            elif known(letter.sender_path):
                cell = letter.sender_path
            else:
                cell = ""
            key = (letter.error_code, cell)
            counts[key] = counts.get(key, 0) + 1
