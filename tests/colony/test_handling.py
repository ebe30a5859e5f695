"""What a ``handling`` row says of one handling: its outcome, its error, its LLM call."""

from __future__ import annotations

from typing import Any

from colony.cell import Emission
from colony.config.models import ColonyConfig
from colony.dead_letters import DeadLetterCode
from colony.envelope import Envelope
from colony.handling import ERROR_CHARS, handled
from colony.ingress import source_message_of
from colony.outcome import Crashed, Outcome, Outputs, Refused, TimedOut


def message() -> Envelope:
    return source_message_of("/cell", {"x": 1}, ColonyConfig())


def row(outcome: Outcome, started: int = 1000, ended: int = 1250) -> Any:
    return handled("/cell", "llm", message(), outcome, started, ended)


def llm_reply(**hop: Any) -> dict[str, Any]:
    return {"header": {"finish_reason": "stop", **hop}, "messages": [], "meta": {"latency_ms": 180}}


def test_a_handling_that_emitted_normally_is_ok_with_its_duration() -> None:
    done = row(Outputs([{"messages": []}]))
    assert (done.outcome, done.error, done.started_ms, done.duration_ms) == ("ok", None, 1000, 250)
    assert done.model is None


def test_an_emission_with_a_model_and_token_counts_is_an_llm_call() -> None:
    reply = llm_reply(model="gpt-x", tokens_prompt=12, tokens_completion=7)
    call = row(Outputs([reply]))
    assert (call.model, call.tokens_prompt, call.tokens_completion) == ("gpt-x", 12, 7)
    assert call.llm_latency_ms == 180  # the provider's latency, not the handling's


def test_a_loop_reply_s_input_tokens_count_as_the_prompt_and_latency_falls_back() -> None:
    reply = {"header": {"model": "m", "tokens_input": 30, "tokens_completion": 4}}
    call = row(Outputs([Emission(reply)]))
    assert (call.tokens_prompt, call.tokens_completion, call.llm_latency_ms) == (30, 4, 250)


def test_a_model_without_token_counts_is_not_taken_for_an_llm_call() -> None:
    assert row(Outputs([{"header": {"model": "just a field"}}])).model is None
    assert row(Outputs([{"header": {"model": "m", "tokens_prompt": True}}])).model is None


def test_an_error_emission_makes_the_step_an_error_with_its_code_and_cause() -> None:
    failed = {
        "header": {"finish_reason": "error", "error_code": "provider_error"},
        "messages": [],
        "meta": {"error": {"detail": "503 from upstream"}},
    }
    step = row(Outputs([failed]))
    assert step.outcome == "error"
    assert step.error == "provider_error: 503 from upstream"


def test_crashes_timeouts_and_refusals_keep_their_outcome_and_cause() -> None:
    assert (row(Crashed("ValueError: boom")).outcome, row(Crashed("ValueError: boom")).error) == (
        "crashed",
        "ValueError: boom",
    )
    assert row(TimedOut()).outcome == "timed_out"
    refused = row(Refused(DeadLetterCode.CONSUMES_VIOLATION, "body.x must be a string"))
    assert refused.outcome == "refused"
    assert refused.error == "consumes_violation: body.x must be a string"


def test_an_error_text_is_kept_to_a_bounded_length_and_a_clock_step_back_is_zero() -> None:
    long = row(Crashed("x" * (ERROR_CHARS * 3)))
    assert long.error is not None
    assert len(long.error) == ERROR_CHARS
    assert row(Outputs([]), started=2000, ended=1990).duration_ms == 0
