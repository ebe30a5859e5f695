"""The request bodies of the HTTP API, as the handlers validate them and the OpenAPI document
describes them (:mod:`colony.openapi` reads these models; it never restates them).

``POST /messages`` keeps meclaw's answer codes: which field failed decides the token
(``invalid_target``, ``invalid_ubf_body``, ``invalid_headers``, ``invalid_hop``, ``invalid_ttl``),
all 422. Keys beyond the five are ignored, as in meclaw. ``headers``, ``hop`` and ``ttl`` are
checked by :mod:`colony.ingress`, as every door checks them; the model only describes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from colony.envelope import Envelope
from colony.errors import ColonyError
from colony.ingress import MAX_TTL, MIN_TTL, IngressRefused, source_message_of
from colony.ubf import UBF_SCHEMA, body_problem

if TYPE_CHECKING:
    from colony.config.models import ColonyConfig

_NULLABLE_OBJECT = {"type": "object", "nullable": True}


class PostMessage(BaseModel):
    """``POST /messages``: a source message entering the colony."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    target: Annotated[str, Field(min_length=1)]
    """The path it is routed to (relative paths resolve against ``/``)."""
    body: Annotated[dict[str, Any], WithJsonSchema(UBF_SCHEMA)]
    """A UBF body."""
    headers: Annotated[Any, WithJsonSchema(_NULLABLE_OBJECT)] = None
    """Becomes the message's ``context``."""
    hop: Annotated[Any, WithJsonSchema(_NULLABLE_OBJECT)] = None
    """Becomes the message's ``hop``."""
    ttl: Annotated[
        Any,
        WithJsonSchema(
            {"type": "integer", "minimum": MIN_TTL, "maximum": MAX_TTL, "nullable": True}
        ),
    ] = None
    """Routing budget; ``colony.json message_default_ttl`` when absent."""


_REFUSALS = {
    "target": ("invalid_target", "target must be a non-empty path string"),
    "body": ("invalid_ubf_body", "body must be a JSON object holding a UBF body"),
}


class BodyRefused(ColonyError, ValueError):
    """A ``POST /messages`` document that is understood but refused (422)."""

    code = "body_refused"

    def __init__(self, token: str, detail: str) -> None:
        super().__init__(detail)
        self.token = token
        self.detail = detail


def post_message(doc: Any, config: ColonyConfig) -> Envelope:
    """The source message ``doc`` asks for, or :class:`BodyRefused` with meclaw's token for
    the first field refused (in the order target, body, headers, hop, ttl, then the UBF rules
    of the body)."""
    if not isinstance(doc, dict):
        raise BodyRefused("invalid_json", "the body must be a JSON object")
    if "body" not in doc:
        raise BodyRefused("invalid_ubf_body", "body is required")
    try:
        request = PostMessage.model_validate(doc)
    except ValidationError as exc:
        field = str(exc.errors(include_url=False, include_input=False)[0]["loc"][0])
        token, detail = _REFUSALS.get(field, ("invalid_json", "the request is malformed"))
        if field == "target" and "target" not in doc:
            detail = "target is required"
        raise BodyRefused(token, detail) from None
    try:
        message = source_message_of(
            request.target,
            request.body,
            config,
            ttl=request.ttl,
            context=request.headers,
            hop=request.hop,
            context_key="headers",
        )
    except IngressRefused as exc:
        raise BodyRefused(exc.code, exc.detail) from None
    problem = body_problem(request.body)
    if problem is not None:
        raise BodyRefused("invalid_ubf_body", problem)
    return message
