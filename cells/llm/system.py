"""The persistent ``system`` tree of an llm cell: leaves, the write gate, prompt and tools.

A *leaf* is any object holding ``text`` (or a legacy ``text_id``); its dotted path
(``identity.soul``, ``tools.web_search``) is its slot. Leaves persist in ``cell.db`` until
overwritten or removed by ``"$replace": true`` on an enclosing node. ``system.tools.<name>``
leaves are the request's tools (their text parsed as JSON, in name order); every other
top-level slot feeds the system prompt — ``system_order`` first, then alphabetically, each
slot walked depth-first in key order, non-empty texts joined by a blank line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from colony.jsonwire import JsonRefused, loads

JsonObject = dict[str, Any]


class GateError(Exception):
    """A system write the gate refuses (``invalid_input``)."""


class PromptError(Exception):
    """The persisted tree cannot become a request (``provider_error``, source ``translate``)."""


@dataclass(slots=True)
class SystemWrite:
    leaves: dict[str, JsonObject] = field(default_factory=dict)
    """slot path → leaf object (``$`` keys removed)."""
    replaces: list[str] = field(default_factory=list)
    """Paths whose stored subtree is removed before the leaves are written."""


def _is_leaf(node: Mapping[str, Any]) -> bool:
    return "text" in node or "text_id" in node


def parse_write(system: Any) -> SystemWrite:
    """The leaves and replacements a ``system`` body slot asks for."""
    out = SystemWrite()

    def walk(node: Any, path: str) -> None:
        where = f"system.{path}" if path else "system"
        if not isinstance(node, dict):
            raise GateError(f"{where} must be an object")
        for key in node:
            if key.startswith("$") and key != "$replace":
                raise GateError(f"{where}: unknown directive {key!r} (only $replace exists)")
        if "$replace" in node:
            if node["$replace"] is not True:
                raise GateError(f"{where}.$replace must be true")
            out.replaces.append(path)
        if _is_leaf(node):
            if not path:
                raise GateError("system itself cannot be a leaf; put the text under a slot name")
            out.leaves[path] = {k: v for k, v in node.items() if not k.startswith("$")}
            return
        for key, child in node.items():
            if key.startswith("$"):
                continue
            if not key or "." in key:
                raise GateError(f"{where}: slot name {key!r} must be non-empty without dots")
            walk(child, f"{path}.{key}" if path else key)

    walk(system, "")
    return out


def _under(path: str, prefix: str) -> bool:
    return prefix == "" or path == prefix or path.startswith(prefix + ".")


def check_gate(
    write: SystemWrite,
    existing: set[str],
    *,
    max_slots: int,
    max_leaf_bytes: int,
    writable: list[str],
) -> None:
    """Refuse the whole write if any leaf is too big, the tree would hold too many slots, or a
    path is outside ``system_writable``."""
    for path, leaf in write.leaves.items():
        size = len(json.dumps(leaf, separators=(",", ":"), ensure_ascii=False).encode())
        if size > max_leaf_bytes:
            raise GateError(
                f"system.{path} is {size} bytes; system_max_leaf_bytes allows {max_leaf_bytes}"
            )
    if writable:
        for path in [*write.leaves, *write.replaces]:
            if not any(_under(path, prefix) for prefix in writable):
                raise GateError(
                    f"system.{path} is not writable here (system_writable: {', '.join(writable)})"
                )
    kept = {p for p in existing if not any(_under(p, r) for r in write.replaces)}
    total = len(kept | set(write.leaves))
    if total > max_slots:
        raise GateError(
            f"the system tree would hold {total} slots; system_max_slots is {max_slots}"
        )


def tools_of(slots: Mapping[str, JsonObject]) -> list[Any]:
    """The request's tools: each ``tools.<name>`` leaf's text as JSON, in name order."""
    tools: list[Any] = []
    for path in sorted(p for p in slots if p.startswith("tools.")):
        leaf = slots[path]
        text = leaf.get("text")
        if not isinstance(text, str):
            raise PromptError(f"system.{path} has no text holding the tool's JSON schema")
        try:
            tools.append(loads(text))
        except JsonRefused as exc:
            raise PromptError(f"system.{path} text is not JSON: {exc.problem}") from None
    return tools


def prompt_of(slots: Mapping[str, JsonObject], order: list[str]) -> str:
    """The system prompt from every slot but ``tools``."""
    by_slot: dict[str, list[str]] = {}
    for path in slots:
        top = path.split(".", 1)[0]
        if top != "tools":
            by_slot.setdefault(top, []).append(path)
    sequence = [s for s in order if s in by_slot]
    sequence += sorted(s for s in by_slot if s not in sequence)
    texts: list[str] = []
    for slot in sequence:
        for path in sorted(by_slot[slot], key=lambda p: p.split(".")):
            leaf = slots[path]
            if "text_id" in leaf and "text" not in leaf:
                raise PromptError(f"system.{path} is a text_id pointer, which is not resolved here")
            text = leaf.get("text")
            if isinstance(text, str) and text:
                texts.append(text)
    return "\n\n".join(texts)
