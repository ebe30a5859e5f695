"""The substrate's contract gates: required ``consumes`` keys at delivery, and (when
``colony.json strict_validation`` is on) ``emits`` at emission."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from colony.config.models import Contract, EmitSpec
from colony.envelope import Envelope, JsonObject


def _is_uuid(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def type_matches(value: Any, token: str) -> bool:
    """Does a JSON value have the contract type ``token``? Unknown tokens never match."""
    if token == "string":
        return isinstance(value, str)
    if token == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if token == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if token == "boolean":
        return isinstance(value, bool)
    if token == "object":
        return isinstance(value, dict)
    if token == "array":
        return isinstance(value, list)
    if token == "null":
        return value is None
    if token == "blob_uuid":
        return _is_uuid(value)
    return False


@dataclass(frozen=True, slots=True)
class ConsumesGate:
    """The required keys a message must carry before the cell sees it."""

    required: tuple[tuple[str, str, str], ...]
    """``(compartment, key, type)`` with compartment ∈ body, context, hop."""

    @classmethod
    def from_contract(cls, contract: Contract) -> ConsumesGate:
        consumes = contract.consumes
        if consumes is None:
            return cls(())
        required = [
            (compartment, key, spec.type)
            for compartment, specs in (
                ("body", consumes.body),
                ("context", consumes.context),
                ("hop", consumes.hop),
            )
            for key, spec in specs.items()
            if spec.required
        ]
        return cls(tuple(required))

    def violation(self, message: Envelope) -> str | None:
        """Why the message may not reach the cell, or None."""
        for compartment, key, token in self.required:
            if compartment == "body":
                holder = message.body if isinstance(message.body, dict) else {}
            elif compartment == "context":
                holder = message.headers.context
            else:
                holder = message.headers.hop
            if key not in holder:
                return f"required consumes.{compartment} '{key}' missing"
            if not type_matches(holder[key], token):
                return f"required consumes.{compartment} '{key}' is not of type {token}"
        return None


def _emits_problems(values: JsonObject, specs: dict[str, EmitSpec], where: str) -> list[str]:
    problems: list[str] = []
    for key, spec in specs.items():
        if key not in values:
            if spec.required:
                problems.append(f"{where}: '{key}' is a required property")
            continue
        value = values[key]
        token = "string" if spec.type == "blob_uuid" else spec.type
        if not type_matches(value, token):
            problems.append(f"{where}: '{key}' is not of type {spec.type}")
        elif spec.values is not None and value not in spec.values:
            problems.append(f"{where}: '{key}' is not one of {spec.values}")
    return problems


def emits_violation(contract: Contract, hop: JsonObject, body: Any) -> str | None:
    """Why an emission breaks ``contract.emits`` (undeclared keys are fine), or None."""
    emits = contract.emits
    if not emits.body and not emits.hop:
        return None
    problems = _emits_problems(body if isinstance(body, dict) else {}, emits.body, "body")
    problems += _emits_problems(hop, emits.hop, "hop")
    return "; ".join(problems) or None
