"""Several daemons on one colony through PostgreSQL, against one daemon alone, in one run.

Why: the point of a cluster is more conversations per second than one daemon can give, and a
dead node's conversations picked up quickly. Each configuration boots real daemons
(``meclaw --root --node``) on one copy of the store-backed tool loop with a scripted model on
127.0.0.1, sends every conversation over the daemons' HTTP APIs in turn, and times until every
answer is in and the journal is empty:

* **embedded**: one daemon, no ``cluster`` block (SQLite): the baseline;
* **cluster 1 / 2 / 3**: that many nodes on one PostgreSQL schema.

Reported per configuration: turns/s and routing decisions (message-log rows) per second; then,
one conversation alone, the latency of a hop (the turn's time over its decisions), asked on the
node that owns its partition and on another (the hand-over through the journal and NOTIFY);
and, with three nodes idle, the time from ``kill -9`` of the node owning most partitions to
every one of them owned again (it is bounded by the lease: ``--lease-ms``).

    python bench/cluster.py [--conversations N] [--nodes 1,2,3] [--lease-ms MS] [--dsn DSN]
                            [--no-synchronous-commit]

``--no-synchronous-commit`` runs the members' sessions with ``synchronous_commit=off`` (what a
DSN's ``options=-csynchronous_commit=off`` does): a commit no longer waits for the server's
disk, so a crash of the *server* (not of a member) may lose the last moments of hand-offs.

The DSN (default ``COLONY_TEST_PG_DSN`` or the machine's server) gets a schema per
configuration, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _table import record

from colony.load import responder
from colony.load.cluster import Daemons, cluster_tree, send_all
from scripted import ScriptedOpenAI

ROUNDS, TOOLS = 3, 2
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
_OPTIONS = [""]
"""Session settings every member's connections get (``--no-synchronous-commit``)."""


class Schema:
    """A schema of its own on the server, and a DSN whose sessions use it."""

    def __init__(self, server: str, options: str = "") -> None:
        import psycopg

        self.server = server
        self.name = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.name}"')
        option = quote(f"-csearch_path={self.name} {options}".strip(), safe="")
        sep = "&" if "?" in server else "?"
        self.dsn = f"{server}{sep}options={option}&application_name={self.name}"

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND application_name = %s",
                (self.name,),
            )
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')


async def _done(daemons: Daemons, turns: list[str], within: float = 600) -> None:
    deadline = time.monotonic() + within
    wanted = set(turns)
    while True:
        answered = {a["turn"] for a in daemons.answers()}
        if answered >= wanted and daemons.select("SELECT count(*) FROM journal") == [(0,)]:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(wanted - answered)} conversations unanswered")
        await asyncio.sleep(0.05)


async def _boot(
    folder: Path, model: ScriptedOpenAI, nodes: int, dsn: str | None, lease_ms: int
) -> Daemons:
    shape = {"partitions": 12, "lease_ms": lease_ms}
    tree = cluster_tree(folder, model.url, dsn=dsn, cluster=shape)
    daemons = Daemons(tree, dsn)
    for i in range(nodes):
        daemons.start(f"n{i}")
    for node in list(daemons.nodes.values()):
        await daemons.ready(node, within=60)
    if dsn is not None:  # a node that booted later gets partitions by drain: wait for it
        deadline = time.monotonic() + 10 * lease_ms / 1000
        while len(daemons.owners()) < nodes and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return daemons


async def throughput(
    server: str, nodes: int | None, conversations: int, lease_ms: int
) -> dict[str, float]:
    """turns/s and decisions/s of one configuration (``nodes`` None: embedded)."""
    schema = Schema(server, _OPTIONS[0]) if nodes is not None else None
    try:
        async with ScriptedOpenAI([], responder=responder(ROUNDS, TOOLS), keep_requests=False) as m:
            with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
                dsn = None if schema is None else schema.dsn
                daemons = await _boot(Path(tmp), m, nodes or 1, dsn, lease_ms)
                try:
                    turns = [f"c{i:04d}" for i in range(conversations)]
                    started = time.perf_counter()
                    await send_all(daemons, turns)
                    await _done(daemons, turns)
                    seconds = time.perf_counter() - started
                    decisions = daemons.select("SELECT count(*) FROM message_log")[0][0]
                finally:
                    daemons.stop_all()
    finally:
        if schema is not None:
            schema.drop()
    return {"turns_s": conversations / seconds, "decisions_s": decisions / seconds}


async def hop_latency(server: str, lease_ms: int, repeats: int = 5) -> dict[str, float]:
    """One conversation at a time on two nodes: ms per decision, asked on the owner of its
    partition and on the other node."""
    schema = Schema(server, _OPTIONS[0])
    out: dict[str, list[float]] = {"owner": [], "other": []}
    try:
        async with ScriptedOpenAI([], responder=responder(ROUNDS, TOOLS), keep_requests=False) as m:
            with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
                daemons = await _boot(Path(tmp), m, 2, schema.dsn, lease_ms)
                try:
                    owner_of = dict(
                        daemons.select("SELECT partition, owner FROM cluster_partitions")
                    )
                    from colony.cluster.partition import partition_key, partition_of

                    for i in range(repeats * 2):
                        turn = f"h{i:03d}"
                        partition = partition_of(
                            partition_key("context.turn_id", "", {"turn_id": turn}), 12
                        )
                        owner = owner_of[partition]
                        where = "owner" if i % 2 == 0 else "other"
                        ask = (
                            owner
                            if where == "owner"
                            else next(n for n in daemons.nodes if n != owner)
                        )
                        before = daemons.select("SELECT count(*) FROM message_log")[0][0]
                        started = time.perf_counter()
                        await send_all(_only(daemons, ask), [turn])
                        await _done(daemons, [f"h{k:03d}" for k in range(i + 1)])
                        seconds = time.perf_counter() - started
                        hops = daemons.select("SELECT count(*) FROM message_log")[0][0] - before
                        out[where].append(seconds * 1000 / max(1, hops))
                finally:
                    daemons.stop_all()
    finally:
        schema.drop()
    return {k: statistics.median(v) for k, v in out.items()}


def _sync_label() -> str:
    return " (synchronous_commit off)" if _OPTIONS[0] else ""


def _only(daemons: Daemons, name: str) -> Daemons:
    """The same daemons, as seen by a client that asks only ``name``."""
    view = Daemons(daemons.tree, daemons.dsn)
    view.nodes = {name: daemons.nodes[name]}
    return view


async def takeover(server: str, lease_ms: int) -> float:
    """Seconds from kill -9 of the busiest of three idle nodes to its partitions owned again."""
    schema = Schema(server, _OPTIONS[0])
    try:
        async with ScriptedOpenAI([], responder=responder(ROUNDS, TOOLS), keep_requests=False) as m:
            with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
                daemons = await _boot(Path(tmp), m, 3, schema.dsn, lease_ms)
                try:
                    victim, _ = daemons.owners().most_common(1)[0]
                    started = time.perf_counter()
                    daemons.kill(daemons.nodes[victim])
                    while True:
                        owners = daemons.owners()
                        if victim not in owners and sum(owners.values()) == 12:
                            break
                        await asyncio.sleep(0.02)
                    return time.perf_counter() - started
                finally:
                    daemons.stop_all()
    finally:
        schema.drop()


async def main_async(args: argparse.Namespace) -> int:
    server = args.dsn or os.environ.get("COLONY_TEST_PG_DSN") or DEFAULT_DSN
    n = args.conversations
    try:
        import psycopg

        psycopg.connect(server, connect_timeout=3).close()
    except Exception as exc:  # no server here: say so, measure nothing
        print(f"bench/cluster.py skipped: no PostgreSQL answers ({type(exc).__name__})")
        return 0
    if args.no_synchronous_commit:
        _OPTIONS[0] = "-csynchronous_commit=off"
    sync = "off" if args.no_synchronous_commit else "on"
    print(
        f"{n} conversations ({ROUNDS} rounds x {TOOLS} tools each), lease {args.lease_ms} ms, "
        f"synchronous_commit {sync}"
    )
    base = await throughput(server, None, n, args.lease_ms)
    print(
        f"  embedded (one daemon, SQLite): {base['turns_s']:.1f} turns/s, "
        f"{base['decisions_s']:.0f} decisions/s"
    )
    record("cluster", "turns/s, one daemon alone", base["turns_s"], "/s")
    for nodes in args.nodes:
        got = await throughput(server, nodes, n, args.lease_ms)
        ratio = got["turns_s"] / base["turns_s"]
        print(
            f"  cluster, {nodes} node(s): {got['turns_s']:.1f} turns/s "
            f"({ratio:.2f}x embedded), {got['decisions_s']:.0f} decisions/s"
        )
        record(
            "cluster",
            f"turns/s, {nodes} node(s) on PostgreSQL{_sync_label()}",
            got["turns_s"],
            "/s",
            ratio=ratio,
            floor_label="one daemon alone (SQLite), same run",
        )
    hop = await hop_latency(server, args.lease_ms)
    print(
        f"  one conversation alone: {hop['owner']:.2f} ms per decision asked on its owner, "
        f"{hop['other']:.2f} ms asked on another node"
    )
    record("cluster", f"ms per decision, asked on the owner{_sync_label()}", hop["owner"], "ms")
    record(
        "cluster",
        f"ms per decision, asked on another node{_sync_label()}",
        hop["other"],
        "ms",
        floor=hop["owner"],
        floor_label="asked on the owner",
    )
    seconds = await takeover(server, args.lease_ms)
    print(
        f"  takeover after kill -9 of the busiest of 3 nodes: {seconds:.2f} s "
        f"(lease {args.lease_ms / 1000:.1f} s)"
    )
    record(
        "cluster",
        "takeover after kill -9",
        seconds,
        "s",
        floor=args.lease_ms / 1000,
        floor_label="the lease",
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=60)
    parser.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    parser.add_argument("--lease-ms", type=int, default=3000)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--no-synchronous-commit", action="store_true")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
