"""Ingress admission: past the colony's byte bound an ingress is refused with 429 and
``Retry-After`` instead of being held in memory (issue 15, item 13)."""

from __future__ import annotations

import asyncio
from typing import Any

from colony.cell import CellClass, CellType
from colony.envelope import Envelope
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, cell, hive


class _Held:
    """Holds every message until ``opened`` is set."""

    def __init__(self, opened: asyncio.Event) -> None:
        self.opened = opened

    async def handle(self, message: Envelope) -> None:
        await self.opened.wait()


def _body(pad: int) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": "p" * pad}]}


async def test_ingress_is_refused_with_429_once_queued_bytes_pass_the_colony_bound(
    make_tree: TreeFactory,
) -> None:
    tree = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./held"}),
            "main/held/config.json": cell("held"),
        }
    )
    opened = asyncio.Event()
    types = {"held": CellType("held", CellClass.STATEFUL, lambda spec: _Held(opened))}
    async with ColonyHarness(
        tree, cell_types=types, colony={"queued_max_bytes": 100_000}
    ) as harness:
        colony = harness.colony
        assert colony.admission(40_000) is None
        for _ in range(4):  # one is being handled, three wait in the mailbox
            await harness.send("/held", _body(40_000))
        refusal = colony.admission(40_000)
        assert refusal is not None
        assert (refusal.status, refusal.token) == (429, "overloaded")
        assert refusal.retry_after_s >= 1
        assert "queued_max_bytes" in refusal.detail
        opened.set()
        await harness.settle()
        assert colony.queued.value == 0
        assert colony.admission(40_000) is None
