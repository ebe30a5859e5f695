"""A node's name: safe in a file name, a log line and a SQL value; unique by default."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colony.cluster.node import NODE_NAME_MAX, default_node_name, node_name_problem


def test_the_default_name_is_the_host_name_and_the_pid() -> None:
    assert default_node_name(host="worker-1.example", pid=4242) == "worker-1.example-4242"
    assert default_node_name().endswith(f"-{os.getpid()}")
    assert default_node_name(pid=7) == default_node_name(host=socket.gethostname(), pid=7)


@given(host=st.text(max_size=200), pid=st.integers(1, 2**22))
def test_the_default_name_is_a_valid_name_whatever_the_host_is_called(host: str, pid: int) -> None:
    name = default_node_name(host=host, pid=pid)
    assert node_name_problem(name) is None, name
    assert name.endswith(f"-{pid}")


@pytest.mark.parametrize("name", ["a", "node-1", "eu_west.2", "A" * NODE_NAME_MAX])
def test_a_plain_name_is_accepted(name: str) -> None:
    assert node_name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "empty"),
        ("A" * (NODE_NAME_MAX + 1), "at most 63"),
        ("-node", "starts with a letter or a digit"),
        (".hidden", "starts with a letter or a digit"),
        ("a/b", "only ASCII letters"),
        ("a b", "only ASCII letters"),
        ("nœud", "only ASCII letters"),
    ],
)
def test_a_name_unsafe_as_a_file_name_is_refused(name: str, says: str) -> None:
    problem = node_name_problem(name)
    assert problem is not None
    assert says in problem
