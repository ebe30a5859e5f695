"""The metrics tap's labels stay bounded whatever messages carry (colony/metrics/tap.py)."""

from __future__ import annotations

from colony.config.models import ColonyConfig
from colony.dead_letters import DeadLetter
from colony.effects import Effects, Handled
from colony.ids import now_ms, uuid7
from colony.ingress import source_message_of
from colony.metrics.tally import Tally
from colony.metrics.tap import MODELS, OTHER, WAIT_MS, HandoffTap, LlmLabels, made_ms

TREE = {"/", "/a", "/brain"}


def tap() -> HandoffTap:
    return HandoffTap(TREE.__contains__, {"/brain": LlmLabels("anthropic", "claude-configured")})


def handed(cell: str, outcome: str = "ok", model: str | None = None, ms: int = 3) -> Effects:
    fx = Effects()
    tokens = 1 if model is not None else None
    fx.handled = Handled("m", "t", cell, "x", 0, ms, outcome, None, model, 7, tokens, tokens)
    return fx


def letter(target: str, sender: str) -> DeadLetter:
    message = source_message_of(target, {"x": 1}, ColonyConfig())
    return DeadLetter("unresolved_path", sender, target, target, message)


def test_past_the_model_cap_a_provider_s_new_models_count_as_other() -> None:
    counting = tap()
    for n in range(MODELS + 5):
        counting.observe(handed("/brain", model=f"model-{n}"))
    counting.observe(handed("/brain", model="model-0"))  # one seen before the cap keeps its label
    models = {model for provider, model in counting.calls if provider == "anthropic"}
    assert len(models) == MODELS + 1
    assert counting.calls[("anthropic", OTHER)].calls == 5
    assert counting.calls[("anthropic", "model-0")].calls == 2


def test_a_failed_llm_handling_counts_as_an_error_of_the_configured_model() -> None:
    counting = tap()
    counting.observe(handed("/brain", outcome="error"))
    counting.observe(handed("/a", outcome="error"))  # not an llm cell, no model: no LLM call
    assert list(counting.calls) == [("anthropic", "claude-configured")]
    call = counting.calls[("anthropic", "claude-configured")]
    assert (call.calls, call.errors) == (1, 1)
    assert counting.cells["/a"].failed == {"error": 1}


def test_a_dead_letter_counts_under_a_node_of_the_tree_or_none() -> None:
    counting = tap()
    fx = Effects()
    fx.letters = [
        letter("/a", "/"),  # its target is a cell: there
        letter("/no/such/0193-uuid", "/a"),  # a path nobody has: its sender
        letter("/no/such/other", "@somewhere"),  # neither: no cell
    ]
    counting.observe(fx)
    assert counting.letters == {
        ("unresolved_path", "/a"): 2,
        ("unresolved_path", ""): 1,
    }


def test_a_tally_buckets_cumulatively_with_inf_last() -> None:
    tally = Tally((1, 5, 10))
    for value in (0, 1, 3, 7, 50):
        tally.add(value)
    assert tally.buckets(0.001) == [("0.001", 2), ("0.005", 3), ("0.01", 4), ("+Inf", 5)]
    assert tally.count == 5
    assert tally.sum(0.001) == 0.061


def test_a_message_s_mailbox_wait_runs_from_its_making_to_its_handling_s_start() -> None:
    counting = tap()
    made = now_ms()
    message_id = uuid7()
    fx = Effects()
    fx.handled = Handled(
        message_id, "t", "/a", "x", made + 2_000, 1, "ok", None, None, None, None, None
    )
    counting.observe(fx)
    counting.observe(handed("/a"))  # an id of another form: no wait is guessed for it
    wait = counting.cells["/a"].wait
    assert wait.count == 1
    assert 2_000 <= wait.total <= 2_001  # the id's millisecond may be the next one
    assert wait.buckets()[WAIT_MS.index(1000)][1] == 0  # not at most 1 s
    assert wait.buckets()[WAIT_MS.index(5000)][1] == 1  # at most 5 s


def test_a_v7_id_carries_the_millisecond_it_was_made_in() -> None:
    before = now_ms()
    made = made_ms(uuid7())
    assert made is not None
    assert before <= made <= now_ms()
    assert made_ms("m") is None
    assert made_ms("0193zzzz-0000-7000-8000-000000000000") is None
