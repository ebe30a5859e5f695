"""``meclaw init DIR``: write a small colony that answers questions, to start from.

The starter is the smallest useful colony with a model in it: a root hive and one ``llm``
cell, ``assistant``. A message entering the root goes to the assistant; its answer (hop
``finish_reason`` ``stop``) goes back to the root marked ``context.answered``, and no edge of
the root takes an answered message, so it leaves the colony there (printed on stdout in direct
mode). The provider is any OpenAI-compatible chat-completions API, named entirely by
``${VAR}``\\s (``LLM_BASE_URL``, ``LLM_API_KEY``, ``LLM_MODEL``) so the tree holds no secret and
runs against a local server as well as a hosted one. ``.env.example`` lists the variables.

The files are kept here as text, not as package data: they are a few lines each, and a test
checks that what ``meclaw init`` writes validates and answers.

``DIR`` must be empty or absent: a starter written over someone's files would mix the two.
``--force`` writes the starter's files into a non-empty folder, replacing only those files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from colony.errors import ColonyError

__all__ = ["STARTER", "InitRefused", "write_starter"]


class InitRefused(ColonyError):
    """``meclaw init`` will not write into this folder (not empty, or not a folder)."""

    code = "init_refused"


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_COLONY = {
    "schema_version": 1,
    "log_default_level": "info",
    "message_default_ttl": 16,
}

_ROOT = {
    "cell": {"type": "hive"},
    "description": "A question enters here, the assistant answers it, and the answer leaves "
    "the colony here (on stdout in direct mode).",
    "params": {
        "graph": {
            "edges": [
                {"from": ".", "to": "./assistant", "condition": "!has(context.answered)"},
                {
                    "from": "./assistant",
                    "to": ".",
                    "condition": "has(hop.finish_reason) && hop.finish_reason == 'stop'",
                    "modifier": {"set_context": {"answered": "true"}},
                },
            ]
        }
    },
}

_ASSISTANT = {
    "cell": {"type": "llm"},
    "description": "Answers the conversation it is given: one call to an OpenAI-compatible "
    "chat-completions API per message.",
    "params": {
        "provider": "openai",
        "base_url": "${LLM_BASE_URL:-https://api.openai.com/v1}",
        "api_key": "${LLM_API_KEY}",
        "model": "${LLM_MODEL:-gpt-4o-mini}",
        "temperature": 0.2,
        "max_tokens": 1024,
    },
    "contract": {"version": "1", "settings": {}, "consumes": {}},
}

_ENV_EXAMPLE = """\
# Copy to .env (next to this file) and fill in; meclaw reads .env at boot.
# Any OpenAI-compatible chat-completions API: OpenAI, OpenRouter, a local server (Ollama's
# /v1, vLLM, llama.cpp). An empty key sends no Authorization header.
LLM_BASE_URL=https://api.openai.com/v1
LLM_API_KEY=sk-replace-me
LLM_MODEL=gpt-4o-mini
"""

_GITIGNORE = """\
.env
*.db
*.db-*
log.jsonl
"""

_README = """\
# A starter colony

Written by `meclaw init`. A question enters the root hive (`main/config.json`), goes to the
`assistant` cell (`main/assistant/config.json`, an `llm` cell), and its answer leaves the
colony at the root: in direct mode it is printed.

    cp .env.example .env                    # then fill in the key (and the URL, the model)
    meclaw --root . --validate              # checks the tree and the .env
    printf 'What is a colony?\\n' | meclaw --root .

Run it as a service with the HTTP API (`POST /messages`), and watch it route:

    meclaw --root . --api 127.0.0.1:7799
    meclaw watch --root .

Grow it by adding cells under `main/` and edges to `main/config.json`: tools, memory, a chat
channel. The project's docs (docs/configuration.md, docs/cells/) describe each cell type.
`.gitignore` keeps the filled-in `.env` and the colony's state (`colony.db`) out of git.
"""

STARTER: dict[str, str] = {
    "colony.json": _json(_COLONY),
    "main/config.json": _json(_ROOT),
    "main/assistant/config.json": _json(_ASSISTANT),
    ".env.example": _ENV_EXAMPLE,
    ".gitignore": _GITIGNORE,
    "README.md": _README,
}
"""Every file of the starter colony, by its path under ``DIR``."""


def write_starter(dest: Path, *, force: bool = False) -> list[Path]:
    """Write :data:`STARTER` under ``dest`` (made if absent); the files written, in order.

    Raises :class:`InitRefused` when ``dest`` is not a folder, or holds anything and ``force``
    is false."""
    try:
        if dest.exists() and not dest.is_dir():
            raise InitRefused(f"{dest} exists and is not a folder; name a new or empty folder")
        if dest.is_dir() and any(dest.iterdir()) and not force:
            raise InitRefused(
                f"{dest} is not empty; name a new or empty folder, or add --force to write the "
                f"starter's files ({', '.join(STARTER)}) into it, replacing those files only"
            )
        written = []
        for name, text in STARTER.items():
            path = dest / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as exc:  # a path through a file, no permission, a full disk: the user's to fix
        where = exc.filename or dest
        raise InitRefused(
            f"cannot write the starter at {where}: {exc.strerror or exc}; name a folder this "
            "user can create and write"
        ) from None
    return written
