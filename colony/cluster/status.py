"""What ``meclaw cluster status`` shows: the nodes, who owns each partition, how old each
lease is, and how many journal rows each partition holds (claimed or waiting for a claim).

Ages are the database's clock minus the row's, so they mean the same whichever machine asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    seen_s: float
    """Seconds since the node last renewed its leases."""
    alive: bool
    """Its lease has not expired."""
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    owner: str | None
    epoch: int
    expires_in_s: float | None
    """Seconds until its lease runs out (negative: expired, free to take), None if free."""
    journal: int
    """Journal rows: messages in flight in this partition."""
    unclaimed: int
    """Of them, not yet taken in by the owner under its epoch."""


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    nodes: list[NodeRow]
    partitions: list[PartitionRow]

    def json(self) -> dict[str, Any]:
        return {
            "nodes": [
                {"node": n.node, "seen_s": n.seen_s, "alive": n.alive, "partitions": n.partitions}
                for n in self.nodes
            ],
            "partitions": [
                {
                    "partition": p.partition,
                    "owner": p.owner,
                    "epoch": p.epoch,
                    "expires_in_s": p.expires_in_s,
                    "journal": p.journal,
                    "unclaimed": p.unclaimed,
                }
                for p in self.partitions
            ],
        }


def read_status(dsn: str) -> ClusterStatus:
    """Read it (blocking) from the cluster database at ``dsn``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        parts = conn.execute(
            "SELECT p.partition, p.owner, p.epoch, "
            "EXTRACT(EPOCH FROM p.expires_at - now())::float, "
            "count(j.seq), count(j.seq) FILTER (WHERE j.epoch IS DISTINCT FROM p.epoch) "
            "FROM cluster_partitions p LEFT JOIN journal j ON j.partition = p.partition "
            "GROUP BY p.partition ORDER BY p.partition"
        ).fetchall()
        nodes = conn.execute(
            "SELECT n.node, EXTRACT(EPOCH FROM now() - n.seen_at)::float, n.expires_at > now(), "
            "(SELECT count(*) FROM cluster_partitions p WHERE p.owner = n.node) "
            "FROM cluster_nodes n ORDER BY n.node"
        ).fetchall()
    return ClusterStatus(
        [NodeRow(r[0], round(r[1], 1), bool(r[2]), int(r[3])) for r in nodes],
        [
            PartitionRow(
                r[0], r[1], int(r[2]), None if r[3] is None else round(r[3], 1), r[4], r[5]
            )
            for r in parts
        ],
    )


def render(status: ClusterStatus) -> list[str]:
    """Plain lines for a terminal: the nodes, then one line per partition."""
    lines = [f"{len(status.nodes)} node(s)"]
    for n in status.nodes:
        state = "alive" if n.alive else "lease expired"
        lines.append(
            f"  {n.node}: {state}, seen {n.seen_s:.1f} s ago, owns {n.partitions} partition(s)"
        )
    lines.append("partition  owner                 epoch  lease left  journal  unclaimed")
    for p in status.partitions:
        left = "-" if p.expires_in_s is None else f"{p.expires_in_s:.1f} s"
        lines.append(
            f"{p.partition:>9}  {p.owner or '(free)':<20}  {p.epoch:>5}  {left:>10}  "
            f"{p.journal:>7}  {p.unclaimed:>9}"
        )
    return lines
