"""Colony path resolution: the documented examples, then properties over messy inputs."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from colony.paths import (
    ANSWERING,
    COLONY_ENDPOINTS,
    EndpointKind,
    colony_endpoint_kind,
    is_absolute,
    is_colony_endpoint,
    join,
    normalise,
    parent,
    resolve,
)

AGENT = "/main/agent"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("./tool", "/main/agent/tool"),
        ("tool", "/main/agent/tool"),
        ("../collector", "/main/collector"),
        ("../../x", "/x"),
        ("", "/main/agent"),
        (".", "/main/agent"),
        ("..", "/main"),
        ("/a//b/./c/", "/a/b/c"),
    ],
)
def test_targets_resolve_relative_to_the_sender(target: str, expected: str) -> None:
    assert resolve(AGENT, target) == expected


def test_dot_dot_beyond_the_root_clamps_to_the_root() -> None:
    assert resolve(AGENT, "../../../../x") == "/x"
    assert resolve("/", "..") == "/"
    assert resolve("/", "../../..") == "/"


@pytest.mark.parametrize(("target", "expected"), [("x", "/x"), ("..", "/"), (".", "/"), ("", "/")])
def test_the_root_sender_resolves_like_any_other(target: str, expected: str) -> None:
    assert resolve("/", target) == expected


def test_an_unnormalised_sender_is_normalised_first() -> None:
    assert resolve("/main//agent/", "tool") == "/main/agent/tool"
    assert resolve("/main/./agent/", "") == "/main/agent"
    assert resolve("/main/x/../agent", "../c") == "/main/c"


def test_an_absolute_target_ignores_the_sender() -> None:
    assert resolve("/elsewhere/deep", "/main/agent") == "/main/agent"
    assert resolve("/elsewhere", "/../x") == "/x"


def test_dotted_names_that_are_not_dot_segments_are_kept() -> None:
    assert resolve(AGENT, "...") == "/main/agent/..."
    assert resolve(AGENT, ".hidden/..x") == "/main/agent/.hidden/..x"


def test_is_absolute_looks_only_at_the_leading_slash() -> None:
    assert is_absolute("/")
    assert is_absolute("/a/../b")
    assert not is_absolute("a")
    assert not is_absolute("./a")
    assert not is_absolute("")


def test_the_root_is_its_own_parent() -> None:
    assert parent("/") == "/"
    assert parent("/main") == "/"
    assert parent("/main/agent") == "/main"
    assert parent("/main//agent/") == "/main"


def test_join_appends_segments_without_escaping_to_the_root() -> None:
    assert join("/main", "agent", "tool") == "/main/agent/tool"
    assert join("/main", "/agent/") == "/main/agent"
    assert join("/main", "..", "..", "x") == "/x"
    assert join("/") == "/"


def test_the_colony_endpoint_covers_its_subtree_only() -> None:
    assert is_colony_endpoint("/colony")
    assert is_colony_endpoint("/colony/stats")
    assert is_colony_endpoint("/colony/a/b")
    assert not is_colony_endpoint("/colonyx")
    assert not is_colony_endpoint("/main/colony")
    assert not is_colony_endpoint("/")


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/colony", EndpointKind.INVALID),
        ("/colony/registry", EndpointKind.READ),
        ("/colony/dead_letters", EndpointKind.READ),
        ("/colony/dead_letters/7", EndpointKind.HTTP_ONLY),
        ("/colony/dead_letters/7/replay", EndpointKind.HTTP_ONLY),
        ("/colony/cells/revive", EndpointKind.HTTP_ONLY),
        ("/colony/events", EndpointKind.HTTP_ONLY),
        ("/colony/mutations", EndpointKind.UNKNOWN),
        ("/colony/registry/x", EndpointKind.UNKNOWN),
        ("/colony/dead_letters/7/replay/again", EndpointKind.UNKNOWN),
        ("/colony/cells", EndpointKind.UNKNOWN),
        ("/colonyx", None),
        ("/main/colony/registry", None),
        ("/", None),
    ],
)
def test_every_colony_path_has_one_kind_from_the_endpoint_table(
    path: str, kind: EndpointKind | None
) -> None:
    assert colony_endpoint_kind(path) is kind


def test_the_answering_endpoints_are_the_reads_of_the_table() -> None:
    reads = [e.path for e in COLONY_ENDPOINTS if e.kind is EndpointKind.READ]
    assert {
        "/colony/registry",
        "/colony/graph",
        "/colony/trace",
        "/colony/messages",
        "/colony/dead_letters",
        "/colony/runs",
        "/colony/stats",
    } == ANSWERING
    assert len(reads) == len(ANSWERING)


def test_the_endpoint_table_lists_normal_distinct_paths_under_colony_only() -> None:
    listed = [e.path for e in COLONY_ENDPOINTS]
    assert len(set(listed)) == len(listed)
    for path in listed:
        assert normalise(path) == path
        assert colony_endpoint_kind(path) is not None
    [invalid] = [e.path for e in COLONY_ENDPOINTS if e.kind is EndpointKind.INVALID]
    assert invalid == "/colony"


endpoint_segments = st.sampled_from(
    ["colony", "registry", "dead_letters", "7", "replay", "events", "{id}", "..", ".", ""]
)


@given(st.lists(endpoint_segments, max_size=6).map("/".join))
def test_a_path_has_an_endpoint_kind_exactly_when_it_lies_under_colony(raw: str) -> None:
    path = normalise(raw)
    assert (colony_endpoint_kind(path) is not None) == is_colony_endpoint(path)
    assert (colony_endpoint_kind(path) is EndpointKind.READ) == (path in ANSWERING)


# Properties. Segments mix the tricky ones with plain names so that slashes, dots and
# empties land everywhere: leading, trailing, doubled.
segments = st.sampled_from(["", ".", "..", "a", "b", "cell", "...", ".x", "é"])
raw_paths = st.lists(segments, max_size=8).map("/".join)
senders = st.one_of(raw_paths, raw_paths.map(lambda p: "/" + p))
targets = st.one_of(raw_paths, raw_paths.map(lambda p: "/" + p))


def assert_normal(path: str) -> None:
    assert path.startswith("/")
    assert path == "/" or not path.endswith("/")
    assert "//" not in path
    assert not {".", ".."} & set(path.split("/"))


@given(senders, targets)
def test_every_resolution_is_a_normal_absolute_path(sender: str, target: str) -> None:
    assert_normal(resolve(sender, target))


@given(senders, targets)
def test_resolving_twice_changes_nothing(sender: str, target: str) -> None:
    once = resolve(sender, target)
    assert resolve(sender, once) == once
    assert normalise(once) == once


@given(senders, senders, targets)
def test_an_absolute_target_resolves_the_same_from_any_sender(
    sender: str, other: str, target: str
) -> None:
    absolute = "/" + target
    assert resolve(sender, absolute) == resolve(other, absolute) == normalise(absolute)


@given(senders)
def test_the_empty_target_is_the_normalised_sender(sender: str) -> None:
    assert resolve(sender, "") == normalise(sender) == resolve(sender, ".")
    assert_normal(normalise(sender))


@given(senders, st.integers(min_value=0, max_value=20))
def test_climbing_never_escapes_above_the_root(sender: str, n: int) -> None:
    result = resolve(sender, "../" * n + "x")
    assert_normal(result)
    assert result.endswith("/x")
    depth = len([s for s in normalise(sender).split("/") if s])
    assert result.count("/") == max(depth - n, 0) + 1


@given(senders, targets)
def test_a_relative_target_stays_within_the_senders_subtree_without_dot_dot(
    sender: str, target: str
) -> None:
    assume(".." not in target.split("/") and not target.startswith("/"))
    base = normalise(sender)
    result = resolve(sender, target)
    assert result == base or result.startswith(base.rstrip("/") + "/")


@given(senders)
def test_parent_is_a_normal_path_one_level_up(sender: str) -> None:
    up = parent(sender)
    assert_normal(up)
    assert up == resolve(sender, "..")


def test_a_target_spelt_in_nfd_resolves_to_the_nfc_path_the_loader_gives_its_folder() -> None:
    nfd, nfc = "cafe\u0301", "caf\u00e9"
    assert resolve("/main", f"./{nfd}") == f"/main/{nfc}"
    assert resolve("/", f"/tools/{nfd}") == f"/tools/{nfc}"
    assert normalise(f"/{nfd}/x") == f"/{nfc}/x"
