"""The TTL arithmetic as properties: whatever the topology, every paid decision costs exactly
one unit, so a budget of ``t`` buys at most ``t`` of them along any chain."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from colony.effects import Effects
from colony.routing import RoutingTable, route
from tests.colony.routing.tables import codes, delivered, edge, message, table

FEW = settings(max_examples=50, deadline=None)
"""Enough examples to find an off-by-one; no deadline (the suite shares its cores)."""


def chain(hives: int, *, restore: bool = False, default_ttl: int = 64) -> RoutingTable:
    """``/h0 → /h1 → … → /sink`` through ``hives`` hives (``/sink`` alone when none)."""
    path = [f"/h{n}" for n in range(hives)]
    stops = [*path, "/sink"]
    restoring = {"restore_ttl": True} if restore else {}
    condition = "true" if restore else None
    return table(
        *(edge(a, b, condition, **restoring) for a, b in itertools.pairwise(stops)),
        cells=["/sink"],
        hives=path,
        default_ttl=default_ttl,
    )


def first(hives: int) -> str:
    return "/h0" if hives else "/sink"


@FEW
@given(st.integers(min_value=0, max_value=16), st.integers(min_value=1, max_value=16))
def test_any_chain_of_n_hives_costs_n_units_before_the_cell(hives: int, spare: int) -> None:
    fx = route(chain(hives), "/", message(first(hives), ttl=hives + spare))
    assert delivered(fx) == [("/sink", spare - 1)]
    assert fx.decisions == hives + 1
    assert fx.letters == []


@FEW
@given(st.integers(min_value=1, max_value=16), st.data())
def test_a_chain_longer_than_the_budget_dies_ttl_expired_after_spending_it_all(
    hives: int, data: st.DataObject
) -> None:
    ttl = data.draw(st.integers(min_value=0, max_value=hives))
    fx = route(chain(hives), "/", message(first(hives), ttl=ttl))
    assert codes(fx) == ["ttl_expired"]
    assert fx.deliveries == []
    assert len(fx.logs) == ttl


CYCLE = table(edge("/", "/b"), edge("/b", "/"), hives=["/", "/b"])


@FEW
@given(st.integers(min_value=0, max_value=100))
def test_a_message_with_ttl_t_takes_exactly_t_paid_decisions_round_a_cycle(ttl: int) -> None:
    fx = route(CYCLE, "/", message("/", ttl=ttl))
    assert [row.ttl for row in fx.logs] == list(range(ttl - 1, -1, -1))
    assert codes(fx) == ["ttl_expired"]
    assert fx.decisions == ttl + 1  # the death is counted, though it costs nothing


@FEW
@given(
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=1, max_value=80),
    st.integers(min_value=1, max_value=80),
)
def test_restoring_transits_reset_to_the_default_and_never_lower_the_budget(
    hives: int, ttl: int, default: int
) -> None:
    # Each transit spends a unit and its edge tops the budget up to the default: however many
    # restores, the cell gets the default (or the larger budget left) less its own decision.
    fx = route(chain(hives, restore=True, default_ttl=default), "/", message("/h0", ttl=ttl))
    assert delivered(fx) == [("/sink", max(ttl - hives, default) - 1)]


# -- any small topology -----------------------------------------------------------------------

HIVES = ["/", "/h"]
NODES = [*HIVES, "/c", "/off", "/x"]
"""Two hives, an active cell ``/c``, an inactive cell ``/off`` and ``/x``, which is nothing."""

topologies = st.lists(st.tuples(st.sampled_from(HIVES), st.sampled_from(NODES)), max_size=5)


def paid_decisions(fx: Effects) -> int:
    """Decisions that cost a unit: deliveries and transits (the logged ones) and misses."""
    return len(fx.logs) + codes(fx).count("unresolved_path")


@FEW
@given(topologies, st.sampled_from(NODES), st.integers(min_value=0, max_value=4))
def test_in_any_topology_every_logged_decision_costs_its_message_one_unit(
    edges: list[tuple[str, str]], target: str, ttl: int
) -> None:
    routes = table(*(edge(a, b) for a, b in edges), cells=["/c"], inactive=["/off"], hives=HIVES)
    sent = message(target, ttl=ttl)
    fx = route(routes, "/", sent)
    spent = {row.message.id: row.ttl for row in fx.logs}
    for row in fx.logs:
        before = ttl if row.message is sent else spent[row.message.parent_message_id or ""]
        assert row.ttl == before - 1 >= 0
    assert {d.cell for d in fx.deliveries} <= {"/c"}
    assert len({d.message.id for d in fx.deliveries}) == len(fx.deliveries)
    assert fx.decisions == paid_decisions(fx) + codes(fx).count("ttl_expired")
    assert (fx.decisions == 0) == (target == "/off" and ttl > 0)  # an inactive cell costs nothing
