"""Load runs: many conversations at once through the store-backed tool loop, checked.

* :mod:`colony.load.driver` — one run in this process (:func:`run_load`) and its checks;
* :mod:`colony.load.restart` — the same run in a daemon process killed (``kill -9``) halfway
  and started again on the same folder;
* :mod:`colony.load.answers` — the ``/sink`` that notes every answer;
* :mod:`colony.load.watch` — the journal's depth and whether the colony still moves.
"""

from colony.load.driver import LOOP_TREE as LOOP_TREE
from colony.load.driver import LoadResult as LoadResult
from colony.load.driver import question as question
from colony.load.driver import responder as responder
from colony.load.driver import run_load as run_load

__all__ = ["LOOP_TREE", "LoadResult", "question", "responder", "run_load"]
