"""How handling one message ended, as a runner reports it to the colony.

A runner never calls back into the colony while it handles a message: it returns one of these
and the colony settles it (:func:`colony.routing.route_outcome` says what each one causes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from colony.cell import Output
from colony.dead_letters import DeadLetterCode


@dataclass(frozen=True, slots=True)
class Outputs:
    """The cell returned (or, a long-running cell, emitted) these; possibly none."""

    outputs: Sequence[Output]


@dataclass(frozen=True, slots=True)
class Crashed:
    """The cell raised, or could not be built: the message is dead-lettered
    ``cell_crashed``."""

    error: str
    """``"Type: message"`` of the exception."""


@dataclass(frozen=True, slots=True)
class TimedOut:
    """The ``message_timeout`` backstop elapsed: an error reply to ``reply_to``, else a dead
    letter ``message_timeout``."""


@dataclass(frozen=True, slots=True)
class Refused:
    """The message never reached the cell: its ``consumes`` gate refused it
    (``consumes_violation``: a reply, else a dead letter) or the cell has failed
    (``cell_inactive``: always a dead letter)."""

    code: DeadLetterCode
    detail: str


Outcome = Outputs | Crashed | TimedOut | Refused
