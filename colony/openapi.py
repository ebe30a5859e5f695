"""The OpenAPI document served at ``/openapi.json`` (tested against the behaviour)."""

from __future__ import annotations

from typing import Any

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(code): _json(_ERROR, "error") for code in codes}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_LIMIT = _query("limit", {"type": "integer"}, "1..1000 (clamped), default 100")
_SINCE = _query("since", {"type": "integer"}, "unix seconds")
_TRACE = _query("trace_id", {"type": "string", "format": "uuid"}, "a trace id")

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "colony daemon", "version": "1"},
    "paths": {
        "/health": {
            "get": {
                "summary": "Liveness",
                "responses": {"200": _json({"type": "object"}, "alive")},
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
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["target", "body"],
                                "properties": {
                                    "target": {"type": "string"},
                                    "body": {"type": "object"},
                                    "headers": {"type": "object", "nullable": True},
                                    "hop": {"type": "object", "nullable": True},
                                    "ttl": {"type": "integer", "minimum": 1, "maximum": 4294967295},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "202": _json(
                        {
                            "type": "object",
                            "properties": {
                                "message_id": {"type": "string"},
                                "trace_id": {"type": "string"},
                            },
                        },
                        "accepted",
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
                    **_errors(400, 415, 422),
                },
            }
        },
        "/colony/registry": {
            "get": {
                "summary": "Cells",
                "parameters": [
                    _query("path", {"type": "string"}, "exact path"),
                    _query("path_prefix", {"type": "string"}, "path prefix"),
                    _query("type", {"type": "string"}, "cell type"),
                    _query("active", {"type": "string"}, "true or false"),
                    _LIMIT,
                ],
                "responses": {"200": _json({"type": "object"}, "registry"), **_errors(400)},
            }
        },
        "/colony/graph": {
            "get": {
                "summary": "Nodes and edges",
                "parameters": [_query("scope", {"type": "string"}, "a hive path, default /")],
                "responses": {"200": _json({"type": "object"}, "graph")},
            }
        },
        "/colony/trace": {
            "get": {
                "summary": "Message-log rows of a trace, oldest first",
                "parameters": [
                    _TRACE,
                    _query("path_prefix", {"type": "string"}, "to_path prefix"),
                    _SINCE,
                    _LIMIT,
                ],
                "responses": {"200": _json({"type": "object"}, "trace"), **_errors(400)},
            }
        },
        "/colony/messages": {
            "get": {
                "summary": "Message-log rows, newest first",
                "parameters": [
                    _TRACE,
                    _query("id", {"type": "string", "format": "uuid"}, "a message id"),
                    _query("to_path_prefix", {"type": "string"}, "to_path prefix"),
                    _query("from_path_prefix", {"type": "string"}, "from_path prefix"),
                    _SINCE,
                    _LIMIT,
                ],
                "responses": {"200": _json({"type": "object"}, "messages"), **_errors(400)},
            }
        },
        "/colony/dead_letters": {
            "get": {
                "summary": "Dead letters, oldest first",
                "parameters": [_query("error_code", {"type": "string"}, "a code"), _SINCE, _LIMIT],
                "responses": {"200": _json({"type": "object"}, "dead letters"), **_errors(400)},
            },
            "delete": {
                "summary": "Remove dead letters (all, or those matching the filters); returns them",
                "parameters": [
                    _query("error_code", {"type": "string"}, "a code"),
                    _SINCE,
                    _query("ids", {"type": "string"}, "comma-separated ids"),
                ],
                "responses": {"200": _json({"type": "object"}, "removed"), **_errors(400)},
            },
        },
        "/colony/dead_letters/{id}": {
            "get": {
                "summary": "One dead letter with its stored message and replay marks",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
                ],
                "responses": {"200": _json({"type": "object"}, "dead letter"), **_errors(400, 404)},
            }
        },
        "/colony/dead_letters/{id}/replay": {
            "post": {
                "summary": "Re-drive a dead letter: fresh TTL, new message id, same trace; "
                "a letter replayed before needs force=true (409 otherwise)",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}},
                    _query("force", {"type": "string", "enum": ["true", "false"]}, "replay again"),
                ],
                "responses": {
                    "202": _json({"type": "object"}, "re-driven"),
                    **_errors(400, 404, 409),
                },
            }
        },
        "/colony/cells/revive": {
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
                    **_errors(400, 404, 422),
                },
            }
        },
        "/colony/events": {
            "get": {"summary": "Not yet", "responses": {"501": _json(_ERROR, "deferred")}}
        },
        "/llm/chat": {
            "post": {
                "summary": "One llm turn (a loop turn with tools) on the llm cell ?cell=",
                "parameters": [
                    {"name": "cell", "in": "query", "required": True, "schema": {"type": "string"}}
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "200": _json({"type": "object"}, "the reply"),
                    **_errors(400, 404, 409, 422, 502, 503),
                },
            }
        },
    },
}
