"""Several daemons on one colony, driven from outside: what the cluster's e2e tests and its
benchmark share (``tests/e2e/test_cluster.py``, ``bench/cluster.py``).

:func:`cluster_tree` copies the store-backed tool loop with a ``/sink`` that appends each answer
to ``main/sink/answers.jsonl`` (the file is shared by every node on the root: one line per
answer, whichever node gave it) and a ``cluster`` block whose DSN comes from ``.env``;
:class:`Daemons` starts ``meclaw --root --node`` processes on it, finds their APIs, kills,
pauses and stops them, and reads the cluster database; :func:`send_all` puts questions to the
nodes in turn, as a client that retries a dead node's question elsewhere would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from colony.lease import members
from colony.load.driver import LOOP_TREE, question

MECLAW = str(Path(sys.executable).with_name("meclaw"))

SINK = """\
import json, sys
doc = json.load(sys.stdin)
envelope = doc["envelope"]
text = doc["body"]["messages"][-1].get("text")
line = {"turn": envelope["header"]["context"].get("turn_id"), "text": text,
        "parent": envelope.get("parent_message_id")}
with open("answers.jsonl", "a") as out:
    out.write(json.dumps(line) + "\\n")
print("[]")
"""


def _cell(path: Path, doc: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(doc, indent=2))


def cluster_tree(
    folder: Path, model_url: str, *, dsn: str | None, cluster: dict[str, Any] | None = None
) -> Path:
    """The tool loop under ``folder/tree`` against the model at ``model_url``; with ``dsn``,
    a ``cluster`` block (``cluster`` adds to it) whose DSN is read from ``.env``."""
    tree = folder / "tree"
    shutil.copytree(LOOP_TREE, tree, ignore=shutil.ignore_patterns("*.db", "*.db-*", "*.jsonl"))
    llm = tree / "main" / "llm" / "config.json"
    doc = json.loads(llm.read_text())
    doc["params"]["base_url"] = model_url
    llm.write_text(json.dumps(doc, indent=2))
    contract = {"version": "1", "settings": {}, "consumes": {}}
    sink = {"runner": "python3", "script_inline": SINK, "max_concurrency": 1}
    _cell(tree / "main" / "sink", {"cell": {"type": "code"}, "params": sink, "contract": contract})
    park = {"runner": "python3", "script_inline": "print('[]')"}
    _cell(tree / "main" / "park", {"cell": {"type": "code"}, "params": park, "contract": contract})
    if dsn is not None:
        block = {"dsn": "${COLONY_PG_DSN}", "partition_by": "context.turn_id", **(cluster or {})}
        (tree / "colony.json").write_text(json.dumps({"cluster": block}))
        (tree / ".env").write_text(f"COLONY_PG_DSN={dsn}\n")
    return tree


class Node:
    """One daemon process."""

    def __init__(self, name: str, process: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.process = process
        self.api: str | None = None

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class Daemons:
    """The daemons of one run, on one tree (``dsn``: its cluster database, None alone)."""

    def __init__(self, tree: Path, dsn: str | None) -> None:
        self.tree = tree
        self.dsn = dsn
        self.nodes: dict[str, Node] = {}

    def start(self, name: str, env: dict[str, str] | None = None) -> Node:
        node_args = ("--node", name) if self.dsn is not None else ()
        with (self.tree.parent / f"{name}.err").open("wb") as log:
            process = subprocess.Popen(
                [
                    *(MECLAW, "--root", str(self.tree), *node_args, "--daemon"),
                    *("--api", "127.0.0.1:0", "--log", str(self.tree.parent / f"{name}.log")),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # its own process group: a kill takes its workers too
            )
        node = self.nodes[name] = Node(name, process)
        return node

    async def ready(self, node: Node, within: float = 30) -> None:
        """Wait until ``node`` serves its API (its boot, partitions taken, is over)."""
        deadline = time.monotonic() + within
        while node.api is None:
            if not node.alive:
                raise RuntimeError(f"node {node.name} exited: {self.stderr(node.name)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node.name} never served its API")
            for holder in members(self.tree) if self.dsn is not None else []:
                if holder.node == node.name and holder.api:
                    node.api = holder.api
            if self.dsn is None:
                from colony.lease import holder as alone

                found = alone(self.tree)
                if found is not None and found.api:
                    node.api = found.api
            await asyncio.sleep(0.05)

    def stderr(self, name: str) -> str:
        return (self.tree.parent / f"{name}.err").read_text(errors="replace")[-2000:]

    def kill(self, node: Node) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=10)

    def signal(self, node: Node, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, sig)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.alive:
                self.signal(node, signal.SIGCONT)
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            try:
                node.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill(node)

    def select(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows of the colony's database (the cluster's, or colony.db)."""
        if self.dsn is None:
            import sqlite3

            lite = sqlite3.connect(f"file:{self.tree / 'colony.db'}?mode=ro", uri=True)
            try:
                return lite.execute(sql).fetchall()
            finally:
                lite.close()
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql).fetchall()

    def owners(self) -> Counter[str]:
        """Partitions per live owner."""
        rows = self.select(
            "SELECT owner FROM cluster_partitions WHERE owner IS NOT NULL AND expires_at > now()"
        )
        return Counter(r[0] for r in rows)

    def answers(self) -> list[dict[str, Any]]:
        file = self.tree / "main" / "sink" / "answers.jsonl"
        if not file.exists():
            return []
        return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]

    def events(self, name: str) -> list[dict[str, Any]]:
        file = self.tree.parent / f"{name}.log"
        if not file.exists():
            return []
        out = []
        for line in file.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


async def send_all(daemons: Daemons, turns: list[str]) -> None:
    """Each question to the next node in turn; a node that died meanwhile is skipped and the
    question sent again to the next one, with the same idempotency key (as a client would)."""
    names = list(daemons.nodes)
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        for i, turn in enumerate(turns):
            for attempt in range(len(names)):
                node = daemons.nodes[names[(i + attempt) % len(names)]]
                if not node.alive or node.api is None:
                    continue
                try:
                    response = await client.post(
                        f"{node.api}/messages",
                        json={
                            "target": "/capture",
                            "body": question(turn),
                            "headers": {"turn_id": turn},
                        },
                        headers={"Idempotency-Key": f"ask-{turn}"},
                    )
                except httpx.TransportError:
                    continue  # it died under us
                if response.status_code not in (200, 202):
                    raise RuntimeError(f"{node.name} refused {turn}: {response.text}")
                break
            else:
                raise RuntimeError(f"no node took {turn}")
