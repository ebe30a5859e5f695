"""The OpenAPI document served at ``/openapi.json``, generated from the models the handlers
validate with: the read filters of :mod:`colony.queries`, the ``POST /messages`` body of
:mod:`colony.api_models` (with the UBF schema of :mod:`colony.ubf`), and the path items that
mounted routes describe themselves (``POST /llm/chat``, from ``cells.llm.chat_endpoint``). A
parameter or field the server refuses cannot appear here, and the test suite runs
schemathesis against the result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from colony.api_models import PostMessage
from colony.queries import READS, DrainFilters, EventsFilters, Filters

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
}
_DROP = ("title", "default", "description")


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(code): _json(_ERROR, "error") for code in codes}


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in _DROP}


def parameters(model: type[Filters]) -> list[dict[str, Any]]:
    """The query parameters of a filter model, as the HTTP door reads them."""
    properties = model.model_json_schema()["properties"]
    return [
        {
            "name": name,
            "in": "query",
            "required": False,
            "description": schema.get("description", ""),
            "schema": _clean(schema),
        }
        for name, schema in properties.items()
    ]


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A request body model's schema, flattened for OpenAPI 3.0 (no ``$defs``)."""
    schema = model.model_json_schema()
    properties = {name: _clean(prop) for name, prop in schema["properties"].items()}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if schema.get("required"):
        out["required"] = schema["required"]
    if schema.get("additionalProperties") is False:
        out["additionalProperties"] = False
    return out


_ROWS = {"type": "array", "items": {"type": "object"}}
_HEALTH = {
    "type": "object",
    "required": ["status", "reasons", "storage", "journal", "failed_cells", "io_liveness"],
    "properties": {
        "status": {"type": "string", "enum": ["ok", "degraded", "failing"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
        "node": {"type": "string", "description": "a cluster member's name (docs/cluster.md)"},
        "partitions": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "the partitions this cluster member owns",
        },
        "storage": {"type": "object", "required": ["writer_alive", "unavailable", "kept"]},
        "journal": {"type": "object", "required": ["durable", "in_flight"]},
        "failed_cells": {"type": "array", "items": {"type": "string"}},
        "io_liveness": {
            "type": "array",
            "nullable": True,
            "items": {"type": "object", "required": ["path", "task", "state"]},
            "description": "each I/O task's last success and last error; null when no cell "
            "talks to the outside",
        },
    },
}
_READY = {
    "type": "object",
    "required": ["ready", "reason"],
    "properties": {"ready": {"type": "boolean"}, "reason": {"type": "string", "nullable": True}},
}
_READ_ANSWERS: dict[str, dict[str, Any]] = {
    "registry": {"registry": _ROWS},
    "graph": {"graph": {"type": "object", "required": ["scope", "nodes", "edges"]}},
    "trace": {"trace": _ROWS},
    "messages": {
        "messages": _ROWS,
        "next": {"type": "object", "nullable": True},
        "scan_budget": {"type": "integer"},
        "scan_truncated": {"type": "boolean"},
    },
    "dead_letters": {"dead_letters": _ROWS},
    "runs": {"runs": _ROWS},
    "stats": {
        "stats": {
            "type": "object",
            "required": ["decisions", "dead_letters", "uptime_s", "watchers", "series"],
        }
    },
}
_SUMMARIES = {
    "runs": "Recent traces, newest first: duration, hops, LLM calls, tokens, outcome",
    "stats": "Decisions and dead letters since boot and per 10 s for the last 10 minutes",
    "registry": "Cells",
    "graph": "Nodes, and the edges with both ends inside the scope",
    "trace": "Message-log rows of a trace, oldest first",
    "messages": "Message-log rows, newest first, in pages",
    "dead_letters": "Dead letters, oldest first",
}


def _answer(slot: str) -> dict[str, Any]:
    shape = _READ_ANSWERS[slot]
    return {"type": "object", "required": sorted(shape), "properties": shape}


def document(
    *, token_required: bool = False, extra: Mapping[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The document; ``extra`` holds the path items of routes the composition root mounts
    (``POST /llm/chat`` describes itself: the kernel never imports cells)."""
    busy = _errors(429, 503)  # every route with a body may be told to come back later
    paths: dict[str, Any] = {
        "/health": {
            "get": {
                "summary": "The colony's health: ok, degraded or failing, with reasons "
                "(docs/health.md)",
                "security": [],
                "responses": {
                    "200": _json(_HEALTH, "ok or degraded"),
                    "503": _json(_HEALTH, "failing: the storage cannot be written"),
                },
            }
        },
        "/ready": {
            "get": {
                "summary": "Readiness for an orchestrator: 200 while the colony takes traffic",
                "security": [],
                "responses": {
                    "200": _json(_READY, "ready"),
                    "503": _json(_READY, "not ready: the reason says why"),
                },
            }
        },
        "/messages": {
            "post": {
                "summary": "Route a source message into the colony",
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "description": "a second message with the same key is not routed (200)",
                        "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": body_schema(PostMessage)}},
                },
                "responses": {
                    "202": _json(
                        {
                            "type": "object",
                            "required": ["message_id", "trace_id"],
                            "properties": {
                                "message_id": {"type": "string"},
                                "trace_id": {"type": "string"},
                            },
                        },
                        "accepted: committed to colony.db",
                    ),
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "duplicate": {"type": "boolean"},
                                "idempotency_key": {"type": "string"},
                            },
                        },
                        "a message with this Idempotency-Key was taken in before; nothing routed",
                    ),
                    **_errors(400, 408, 413, 415, 422),
                    **busy,
                },
            }
        },
    }
    for endpoint, model in READS.items():
        slot = endpoint.rsplit("/", 1)[-1]
        paths[endpoint] = {
            "get": {
                "summary": _SUMMARIES[slot],
                "parameters": parameters(model),
                "responses": {
                    "200": _json(_answer(slot), slot),
                    **_errors(400, 503),
                },
            }
        }
    paths["/colony/dead_letters"]["delete"] = {
        "summary": "Remove dead letters (all, or those matching the filters); returns them",
        "parameters": parameters(DrainFilters),
        "responses": {"200": _json(_answer("dead_letters"), "removed"), **_errors(400, 503)},
    }
    letter_id = {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
    }
    paths["/colony/dead_letters/{id}"] = {
        "get": {
            "summary": "One dead letter with its stored message and replay marks",
            "parameters": [letter_id],
            "responses": {"200": _json({"type": "object"}, "dead letter"), **_errors(400, 404)},
        }
    }
    paths["/colony/dead_letters/{id}/replay"] = {
        "post": {
            "summary": "Re-drive a dead letter: fresh TTL, new message id, same trace; "
            "a letter replayed before needs force=true (409 otherwise)",
            "parameters": [
                letter_id,
                {
                    "name": "force",
                    "in": "query",
                    "required": False,
                    "description": "replay a letter that was replayed before",
                    "schema": {"type": "string", "enum": ["true", "false"]},
                },
            ],
            "responses": {
                "202": _json({"type": "object"}, "re-driven"),
                **_errors(400, 404, 409),
                **busy,
            },
        }
    }
    paths["/colony/cells/revive"] = {
        "post": {
            "summary": "Revive a failed cell: it takes messages again, restart count reset",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["path"],
                            "properties": {"path": {"type": "string", "minLength": 1}},
                        }
                    }
                },
            },
            "responses": {
                "200": _json({"type": "object"}, "revived (or not failed)"),
                **_errors(400, 404, 415, 422),
                **busy,
            },
        }
    }
    paths["/colony/events"] = {
        "get": {
            "summary": "Live events as Server-Sent Events (route, handle_start, handle_end, "
            "llm, dead_letter; dropped when the client fell behind). Send Last-Event-ID to "
            "get what the record holds since that event first.",
            "parameters": [
                *parameters(EventsFilters),
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "description": "resume after this event (<at_ms>-<n>)",
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": {
                    "description": "an endless text/event-stream",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **_errors(400),
            },
        }
    }
    paths["/metrics"] = {
        "get": {
            "summary": "Prometheus metrics in the text exposition format (docs/metrics.md)",
            "responses": {
                "200": {
                    "description": "every family of this colony, read at this request",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
        }
    }
    paths.update(copy.deepcopy(dict(extra or {})))
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "colony daemon", "version": "1"},
        "paths": paths,
    }
    if token_required:
        doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
        doc["security"] = [{"bearer": []}]
        for item in paths.values():
            for operation in item.values():
                operation.setdefault("responses", {}).update(_errors(401))
    return doc
