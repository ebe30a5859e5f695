"""Three daemons, one colony, one PostgreSQL: conversations survive a node's death and pause.

Real ``meclaw --root --node`` processes on one tree with a ``cluster`` block, the store-backed
tool loop (``fixtures/trees/ttl-budget``) against a scripted model on 127.0.0.1, questions sent
over each daemon's HTTP API in turn. The tree's ``/sink`` is a code cell appending each answer
to a file beside it (shared by the three nodes: one line per answer, whichever node gave it).
What must hold after every scenario: one answer per conversation, every thread row exactly
once, every round fired once, no dead letter, an empty journal, one ingress key per
conversation.
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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from colony.crashpoints import ENV as CRASH_ENV
from colony.lease import members
from colony.load import LOOP_TREE, question, responder
from colony.testing import ScriptedOpenAI
from tests.pg import PgSchema

MECLAW = str(Path(sys.executable).with_name("meclaw"))
ROUNDS, TOOLS = 3, 2
ROWS = 1 + ROUNDS * (1 + TOOLS)
"""Thread rows of one conversation: the user's, then per round the assistant's and each tool's."""
LEASE_MS = 2000
PARTITIONS = 8

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


def cluster_tree(tmp: Path, schema: PgSchema, model_url: str) -> Path:
    tree = tmp / "tree"
    shutil.copytree(LOOP_TREE, tree, ignore=shutil.ignore_patterns("*.db", "*.db-*", "*.jsonl"))
    llm = tree / "main" / "llm" / "config.json"
    doc = json.loads(llm.read_text())
    doc["params"]["base_url"] = model_url
    llm.write_text(json.dumps(doc, indent=2))
    contract = {"version": "1", "settings": {}, "consumes": {}}
    _cell(
        tree / "main" / "sink",
        {
            "cell": {"type": "code"},
            "params": {"runner": "python3", "script_inline": SINK, "max_concurrency": 1},
            "contract": contract,
        },
    )
    _cell(
        tree / "main" / "park",
        {
            "cell": {"type": "code"},
            "params": {"runner": "python3", "script_inline": "print('[]')"},
            "contract": contract,
        },
    )
    (tree / "colony.json").write_text(
        json.dumps(
            {
                "cluster": {
                    "dsn": "${COLONY_PG_DSN}",
                    "partitions": PARTITIONS,
                    "lease_ms": LEASE_MS,
                    "partition_by": "context.turn_id",
                }
            }
        )
    )
    (tree / ".env").write_text(f"COLONY_PG_DSN={schema.dsn}\n")
    return tree


class Node:
    def __init__(self, name: str, process: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.process = process
        self.api: str | None = None

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class Cluster:
    """The daemons of one test, on one tree."""

    def __init__(self, tree: Path, schema: PgSchema) -> None:
        self.tree = tree
        self.schema = schema
        self.nodes: dict[str, Node] = {}

    def start(self, name: str, env: dict[str, str] | None = None) -> Node:
        with (self.tree.parent / f"{name}.err").open("wb") as log:
            process = subprocess.Popen(
                [
                    *(MECLAW, "--root", str(self.tree), "--node", name, "--daemon"),
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
        deadline = time.monotonic() + within
        while node.api is None:
            assert node.alive, f"node {node.name} exited: {self.stderr(node.name)}"
            assert time.monotonic() < deadline, f"node {node.name} never served its API"
            for holder in members(self.tree):
                if holder.node == node.name and holder.api:
                    node.api = holder.api
            await asyncio.sleep(0.05)

    def stderr(self, name: str) -> str:
        return (self.tree.parent / f"{name}.err").read_text(errors="replace")[-2000:]

    def kill(self, node: Node) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=10)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGCONT)
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            try:
                node.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill(node)

    def select(self, sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.schema.dsn, autocommit=True) as conn:
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


@contextlib.asynccontextmanager
async def cluster_of(
    tmp: Path,
    schema: PgSchema,
    names: list[str],
    on_request: Callable[[int], None] | None = None,
    env: dict[str, dict[str, str]] | None = None,
) -> AsyncIterator[tuple[Cluster, list[int]]]:
    """The named nodes started (each with ``env[name]`` added) and serving; with them, the
    count of model requests so far (one list item, updated in place)."""
    respond = responder(ROUNDS, TOOLS)
    seen = [0]

    def counted(body: Any) -> Any:
        seen[0] += 1
        if on_request is not None:
            on_request(seen[0])
        return respond(body)

    async with ScriptedOpenAI([], responder=counted, keep_requests=False) as model:
        tree = cluster_tree(tmp, schema, model.url)
        cluster = Cluster(tree, schema)
        try:
            for name in names:
                cluster.start(name, (env or {}).get(name))
            for name in names:
                await cluster.ready(cluster.nodes[name])
            yield cluster, seen
        finally:
            cluster.stop_all()


async def send_all(cluster: Cluster, turns: list[str]) -> None:
    """Each question to the next node in turn; a node that died meanwhile is skipped and the
    question sent again to the next one, with the same idempotency key (as a client would)."""
    names = list(cluster.nodes)
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        for i, turn in enumerate(turns):
            for attempt in range(len(names)):
                node = cluster.nodes[names[(i + attempt) % len(names)]]
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
                assert response.status_code in (200, 202), response.text
                break
            else:
                raise AssertionError(f"no node took {turn}")


async def until(check: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def settled(cluster: Cluster, turns: list[str]) -> bool:
    answered = {a["turn"] for a in cluster.answers()}
    if not answered >= set(turns):
        return False
    return cluster.select("SELECT count(*) FROM journal") == [(0,)]


def check_outcome(cluster: Cluster, turns: list[str]) -> None:
    """One answer per conversation, every row once, every round fired once, nothing dead."""
    answers: dict[str, set[str]] = {}
    for a in cluster.answers():
        assert a["text"] == f"answer to question {a['turn']}", a
        answers.setdefault(a["turn"], set()).add(a["parent"])  # a redelivery: same parent
    doubled = {t: p for t, p in answers.items() if len(p) > 1}
    assert not doubled, f"answered twice: {doubled}"
    assert set(answers) == set(turns)
    rows = cluster.select(
        'SELECT turn_id, iter, role, turn, fired FROM "/store:thread" ORDER BY "~row"'
    )
    per_turn = Counter(r[0] for r in rows)
    assert {t: per_turn[t] for t in turns} == dict.fromkeys(turns, ROWS)
    distinct = Counter((r[0], r[1], r[2], r[3]) for r in rows)
    assert max(distinct.values()) == 1, "a thread row was written twice"
    assert all(r[4] == 1 for r in rows if r[2] == "assistant"), "a round was never claimed"
    assert cluster.select("SELECT count(*) FROM dead_letters") == [(0,)]
    assert cluster.select("SELECT count(*) FROM journal") == [(0,)]
    keys = cluster.select("SELECT key FROM ingress_keys")
    assert sorted(k for (k,) in keys) == sorted(f"http:ask-{t}" for t in turns)


@pytest.fixture
def turns() -> list[str]:
    return [f"t{i:02d}" for i in range(50)]


async def test_three_nodes_answer_every_conversation_once(
    tmp_path: Path, pg_schema: PgSchema, turns: list[str]
) -> None:
    async with cluster_of(tmp_path, pg_schema, ["a", "b", "c"]) as (cluster, _):
        await until(lambda: len(cluster.owners()) == 3, 20, "three owners")
        await send_all(cluster, turns)
        await until(lambda: settled(cluster, turns), 120, "every answer")
        check_outcome(cluster, turns)
        ran = {
            n: sum(1 for e in cluster.events(n) if e.get("event") == "partitions_gained")
            for n in cluster.nodes
        }
        assert all(ran.values()), ran


async def test_a_killed_node_s_conversations_finish_on_the_others_once(
    tmp_path: Path, pg_schema: PgSchema, turns: list[str]
) -> None:
    box: dict[str, Any] = {}

    def on_request(n: int) -> None:  # a third of the way: kill the busiest node
        if n == len(turns) * (ROUNDS + 1) // 3 and "cluster" in box:
            cluster: Cluster = box["cluster"]
            owner, _ = cluster.owners().most_common(1)[0]
            box["killed"] = owner
            with contextlib.suppress(ProcessLookupError):
                os.killpg(cluster.nodes[owner].process.pid, signal.SIGKILL)

    async with cluster_of(tmp_path, pg_schema, ["a", "b", "c"], on_request) as (cluster, _):
        box["cluster"] = cluster
        await until(lambda: len(cluster.owners()) == 3, 20, "three owners")
        await send_all(cluster, turns)
        await until(lambda: "killed" in box, 60, "the kill")
        await until(lambda: settled(cluster, turns), 120, "every answer after the kill")
        check_outcome(cluster, turns)
        survivors = set(cluster.owners())
        assert box["killed"] not in survivors


CALLS = 50 * (ROUNDS + 1)
"""Model requests of a run of 50 conversations."""


@pytest.mark.parametrize("point", ["journal.commit:60", "store.write:40", "llm.replied:30"])
async def test_a_node_dying_at_a_crash_point_loses_and_doubles_nothing(
    tmp_path: Path, pg_schema: PgSchema, turns: list[str], point: str
) -> None:
    env = {"a": {CRASH_ENV: point}}
    async with cluster_of(tmp_path, pg_schema, ["a", "b", "c"], env=env) as (cluster, _):
        await until(lambda: len(cluster.owners()) == 3, 20, "three owners")
        await send_all(cluster, turns)
        a = cluster.nodes["a"]
        await until(lambda: not a.alive, 60, f"node a reaching {point}")
        assert a.process.returncode == -signal.SIGKILL
        await until(lambda: settled(cluster, turns), 120, "every answer after the crash")
        check_outcome(cluster, turns)


async def test_a_node_paused_past_its_lease_writes_nothing_when_it_wakes(
    tmp_path: Path, pg_schema: PgSchema, turns: list[str]
) -> None:
    async with cluster_of(tmp_path, pg_schema, ["a", "b"]) as (cluster, seen):
        await until(lambda: len(cluster.owners()) == 2, 20, "two owners")
        await send_all(cluster, turns)
        await until(lambda: seen[0] >= CALLS // 3, 60, "a third of the model calls")
        a = cluster.nodes["a"]
        os.killpg(a.process.pid, signal.SIGSTOP)
        try:
            await until(lambda: cluster.owners() == {"b": PARTITIONS}, 30, "b taking all over")
        finally:
            os.killpg(a.process.pid, signal.SIGCONT)
        await until(lambda: settled(cluster, turns), 120, "every answer after the pause")
        check_outcome(cluster, turns)
        await until(
            lambda: any(e.get("event") == "partitions_lost" for e in cluster.events("a")),
            10,
            "a noticing it lost its partitions",
        )


async def test_a_node_joining_mid_load_takes_partitions_only_by_drain(
    tmp_path: Path, pg_schema: PgSchema, turns: list[str]
) -> None:
    async with cluster_of(tmp_path, pg_schema, ["a", "b"]) as (cluster, seen):
        await until(lambda: len(cluster.owners()) == 2, 20, "two owners")
        await send_all(cluster, turns)
        await until(lambda: seen[0] >= CALLS // 4, 60, "a quarter of the model calls")
        c = cluster.start("c")
        await cluster.ready(c)
        await until(lambda: cluster.owners().get("c", 0) > 0, 30, "c taking partitions")
        await until(lambda: settled(cluster, turns), 120, "every answer")
        check_outcome(cluster, turns)
        for name in ("a", "b", "c"):
            events = {e.get("event") for e in cluster.events(name)}
            assert "partitions_lost" not in events, f"{name} lost a partition by force"
        handed = [e for n in ("a", "b") for e in cluster.events(n)]
        assert any(e.get("event") == "partition_handed_back" for e in handed)
