"""How fast each CEL engine evaluates a typical edge condition.

Routing evaluates a few conditions per message, so two numbers matter: one evaluation
against a prepared activation, and a whole message (build the activation, evaluate). The floor,
measured in the same run, is the same condition written as a Python expression over the dicts:
what a condition would cost if it were not CEL. It measures every engine that imports here and
prints the ratio between the fastest and the slowest.

    python bench/expressions.py [--loop ...]

No event loop is involved: ``--loop`` is accepted so every benchmark takes the same flags, and
the figures are recorded once, under no loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from _loops import add_loop_argument
from _table import record

from colony.expressions import JsonValue, available_engines, make_engine

CONDITION = "has(hop.route) && hop.route == 'fire' && int(context.iter) < 12"
HOP: dict[str, JsonValue] = {"route": "fire", "tokens_prompt": "120", "from": "planner"}
CONTEXT: dict[str, JsonValue] = {"iter": "3", "store_origin": "collector", "tokens_seen": "1000"}

REPEATS = 3
MAX_CALLS = 100_000
TIME_BOX = 2.0  # seconds per repeat, so the slow engine does not take minutes


def calls_per_second(call: Callable[[], object]) -> float:
    """Median rate over REPEATS runs of up to MAX_CALLS calls or TIME_BOX seconds."""
    rates = []
    for _ in range(REPEATS):
        calls = 0
        start = time.perf_counter()
        deadline = start + TIME_BOX
        # Batches of 100 keep the clock out of the measurement.
        while calls < MAX_CALLS:
            for _ in range(100):
                call()
            calls += 100
            if time.perf_counter() >= deadline:
                break
        rates.append(calls / (time.perf_counter() - start))
    return statistics.median(rates)


def measure(name: str) -> tuple[float, float]:
    """(evaluations per second, messages per second) for one engine."""
    engine = make_engine(name)
    program = engine.compile(CONDITION)
    activation = engine.activation({"hop": HOP, "context": CONTEXT})
    if program.evaluate(activation) is not True:
        raise SystemExit(f"{name}: the benchmark condition does not hold")
    evaluate = calls_per_second(lambda: program.evaluate(activation))
    per_message = calls_per_second(
        lambda: program.evaluate(engine.activation({"hop": HOP, "context": CONTEXT}))
    )
    return evaluate, per_message


def python_floor() -> float:
    """Evaluations per second of the condition as plain Python over the same dicts."""

    def condition() -> bool:
        iteration = CONTEXT["iter"]
        assert isinstance(iteration, str)
        return "route" in HOP and HOP["route"] == "fire" and int(iteration) < 12

    if condition() is not True:
        raise SystemExit("python: the benchmark condition does not hold")
    return calls_per_second(condition)


def main() -> int:
    results: dict[str, float] = {}
    floor = python_floor()
    label = "the condition as a Python expression"
    for name in available_engines():
        evaluate, per_message = measure(name)
        results[name] = evaluate
        print(
            f"{name:>16}: {evaluate:>11,.0f} evals/s  {1e6 / evaluate:8.2f} µs/eval   "
            f"per message (activation + eval): {per_message:>10,.0f}/s "
            f"{1e6 / per_message:8.2f} µs"
        )
        for figure, rate in (("evaluation", evaluate), ("activation + evaluation", per_message)):
            record(
                "expressions",
                f"{figure}, {name}",
                1e6 / rate,
                "µs",
                floor=1e6 / floor,
                floor_label=label,
            )
    print(f"{'python floor':>16}: {floor:>11,.0f} evals/s  {1e6 / floor:8.2f} µs/eval ({label})")
    if len(results) > 1:
        fast, slow = max(results, key=results.__getitem__), min(results, key=results.__getitem__)
        print(f"{fast} is {results[fast] / results[slow]:.0f}x faster than {slow} per evaluation")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_loop_argument(parser)
    parser.parse_args()
    sys.exit(main())
