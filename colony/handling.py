"""How one handling went, as the record keeps it (:class:`colony.effects.Handled`).

Built by the colony when a runner reports an outcome, from the outcome and what the cell
emitted: an emission whose header says ``finish_reason: "error"`` makes the step an
``error`` (with the cause it carries), and one whose header carries a ``model`` and token
counts (meclaw's hop fields an ``llm`` cell sets) makes it an LLM call. Nothing here asks a
cell for anything, so any cell that speaks those hop fields is accounted alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from colony.cell import Emission, Output
from colony.effects import Handled
from colony.envelope import Envelope, split_content
from colony.failures import error_code, error_text
from colony.outcome import Crashed, Outcome, Outputs, Refused, TimedOut

ERROR_CHARS = 2000
"""The most of an error's text a ``handling`` row keeps (the message log has the rest)."""


def handled(
    cell: str,
    cell_type: str,
    message: Envelope,
    outcome: Outcome,
    started_ms: int,
    ended_ms: int,
) -> Handled:
    """The ``handling`` row of ``cell``'s handling of ``message``."""
    error: str | None = None
    llm: tuple[str, int | None, int | None, int | None] | None = None
    match outcome:
        case Outputs(outputs):
            kind, error, llm = _outputs(outputs)
        case Crashed(text):
            kind, error = "crashed", text
        case TimedOut():
            kind, error = "timed_out", "the message_timeout backstop elapsed"
        case Refused(code, detail):
            kind, error = "refused", f"{code}: {detail}"
    duration = max(0, ended_ms - started_ms)
    model = latency = prompt = completion = None
    if llm is not None:
        model, latency, prompt, completion = llm
        latency = duration if latency is None else latency
    return Handled(
        message.id,
        message.trace_id,
        cell,
        cell_type,
        started_ms,
        duration,
        kind,
        None if error is None else error[:ERROR_CHARS],
        model,
        latency,
        prompt,
        completion,
    )


def _outputs(
    outputs: Sequence[Output],
) -> tuple[str, str | None, tuple[str, int | None, int | None, int | None] | None]:
    # On every hand-off: only the header is looked at, and the body only for an error's text
    # or an LLM call's latency (no copy of it is made).
    kind, error, llm = "ok", None, None
    for output in outputs:
        content = output.content if isinstance(output, Emission) else output
        hop = content.get("header") if isinstance(content, dict) else None
        if not isinstance(hop, dict):
            continue
        if kind == "ok" and hop.get("finish_reason") == "error":
            code = error_code(hop)
            _, body = split_content(content)
            kind, error = "error", f"{code}: {error_text(body) or '(no error text)'}"
        if llm is None and "model" in hop and isinstance(hop["model"], str):
            prompt = _count(hop.get("tokens_prompt", hop.get("tokens_input")))
            completion = _count(hop.get("tokens_completion"))
            if prompt is not None or completion is not None:
                meta = content.get("meta")
                latency = _count(meta.get("latency_ms")) if isinstance(meta, dict) else None
                llm = (hop["model"], latency, prompt, completion)
    return kind, error, llm


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
