"""What went wrong, in one line: the text an operator reads for an error emission.

A cell's domain failure (a script that raised, a provider that answered 500, a store call that
was refused) is an ordinary emission with ``hop.finish_reason: "error"`` and ``hop.error_code``.
Where the cause is written differs by cell type, so the runner's ``cell_error`` log line, the
direct-mode stderr echo and ``meclaw trace`` all read it through :func:`error_text`:

* ``meta.error`` (the code and llm cells): ``detail`` plus its short fields (url, status,
  exit_code, ...); a ``traceback`` there is apart (:func:`error_traceback`);
* a top-level ``error`` string (the llm cell's loop turns);
* otherwise the last ``tool`` or ``assistant`` turn's text (code, bash, store, file, web cells).
"""

from __future__ import annotations

from typing import Any

_TRACEBACK = "Traceback (most recent call last):"
_MARKERS = ("##meclaw-stderr-start##", "##meclaw-stderr-end##")
"""How the code cell fences a failed script's stderr inside its error text."""
_APART = frozenset({"detail", "traceback", "source", "exit_code"})
"""``meta.error`` fields the summary leaves out (the detail leads it and says what was raised;
a traceback is long)."""


def error_code(hop: Any) -> str | None:
    """``hop.error_code`` when ``hop`` says the cell failed (``finish_reason: "error"``)."""
    if not isinstance(hop, dict) or hop.get("finish_reason") != "error":
        return None
    code = hop.get("error_code")
    return code if isinstance(code, str) and code else "error"


def error_text(body: Any) -> str:
    """The cause an error emission's body carries (empty when it carries none)."""
    if not isinstance(body, dict):
        return ""
    meta = body.get("meta")
    error = meta.get("error") if isinstance(meta, dict) else None
    if isinstance(error, dict):
        detail = error.get("detail")
        fields = {k: v for k, v in error.items() if k not in _APART and v is not None}
        rest = ", ".join(f"{key}={value}" for key, value in fields.items())
        text = str(detail) if detail is not None else ""
        return f"{text} ({rest})" if text and rest else text or rest
    if isinstance(body.get("error"), str):
        return str(body["error"])
    turns = body.get("messages")
    for turn in reversed(turns if isinstance(turns, list) else []):
        if isinstance(turn, dict) and turn.get("origin") in ("tool", "assistant"):
            said = turn.get("text")
            if isinstance(said, str) and said:
                return said
    return ""


def error_traceback(body: Any) -> str | None:
    """The traceback an error emission carries in ``meta.error.traceback`` (a script's), if
    any: for the log line, never for a one-line summary."""
    meta = body.get("meta") if isinstance(body, dict) else None
    error = meta.get("error") if isinstance(meta, dict) else None
    found = error.get("traceback") if isinstance(error, dict) else None
    return found if isinstance(found, str) and found else None


def one_line(text: str, limit: int = 240) -> str:
    """``text`` on one line for a terminal: a traceback becomes its exception line (the last
    unindented line after it), other line breaks become `` | ``, and the result is cut to
    ``limit`` characters. The code cell's stderr markers are dropped."""
    for marker in _MARKERS:
        text = text.replace(marker, "\n")
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    starts = [n for n, line in enumerate(lines) if _TRACEBACK in line]
    if starts:
        after = [line for line in lines[starts[-1] + 1 :] if not line[0].isspace()]
        flat = after[-1] if after else lines[-1].strip()
    else:
        flat = " | ".join(line.strip() for line in lines)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
