"""How fast each CEL engine evaluates a typical edge condition.

Routing evaluates a few conditions per message, so two numbers matter: one evaluation
against a prepared activation, and a whole message (build the activation, evaluate).
Run ``python bench/expressions.py``; it measures every engine that imports here and
prints the ratio between the fastest and the slowest.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

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


def main() -> int:
    results: dict[str, float] = {}
    for name in available_engines():
        evaluate, per_message = measure(name)
        results[name] = evaluate
        print(
            f"{name:>16}: {evaluate:>11,.0f} evals/s  {1e6 / evaluate:8.2f} µs/eval   "
            f"per message (activation + eval): {per_message:>10,.0f}/s "
            f"{1e6 / per_message:8.2f} µs"
        )
    if len(results) > 1:
        fast, slow = max(results, key=results.__getitem__), min(results, key=results.__getitem__)
        print(f"{fast} is {results[fast] / results[slow]:.0f}x faster than {slow} per evaluation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
