"""The plans a store keeps of call texts it has seen: bounded, oldest out first."""

from __future__ import annotations

from cells.store.ops import Plan, Plans


def test_plans_keep_at_most_kept_entries_dropping_the_oldest_and_no_long_text() -> None:
    plans = Plans()
    step = Plan("select", "thread", "SELECT 1")
    for i in range(Plans.KEPT + 1):
        plans.keep(f"call {i}", step)
    assert plans.get("call 0") is None
    assert plans.get("call 1") is step
    assert plans.get(f"call {Plans.KEPT}") is step
    long = "x" * (Plans.TEXT_MAX + 1)
    plans.keep(long, step)
    assert plans.get(long) is None
