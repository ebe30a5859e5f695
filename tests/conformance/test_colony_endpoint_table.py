"""One table of the ``/colony`` endpoints (:data:`colony.paths.COLONY_ENDPOINTS`), and every
part that knows about them agrees with it: the HTTP routes, the read filters, the loader and
``--validate``, and the router.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from colony.api import build_app
from colony.config.diagnostics import Diagnostic
from colony.config.loader import load_tree
from colony.paths import ANSWERING, COLONY_ENDPOINTS, EndpointKind, is_colony_endpoint
from colony.queries import READS
from colony.testing import ColonyHarness
from colony.validate import validate
from tests.conftest import TreeFactory, hive

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}
UNKNOWN = "/colony/mutations"


def concrete(path: str) -> str:
    """A path the template ``path`` stands for (``{id}`` → ``1``)."""
    return "/".join("1" if s.startswith("{") else s for s in path.split("/"))


def expected_warning(kind: EndpointKind) -> str | None:
    """The loader's finding about an edge to a path of this kind."""
    if kind is EndpointKind.READ:
        return None
    if kind is EndpointKind.INVALID:
        return "colony_endpoint_invalid"
    return "colony_endpoint_unknown"


async def test_every_answering_endpoint_has_a_get_route_and_every_colony_route_is_in_the_table(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(make_tree({"main/config.json": hive()})) as colony:
        app = build_app(colony.colony)
        routes = {
            (r.method, r.resource.canonical)
            for r in app.router.routes()
            if r.resource is not None and is_colony_endpoint(r.resource.canonical)
        }
    served = {path for _, path in routes}
    assert {("GET", path) for path in ANSWERING} <= routes
    by_kind = {e.path: e.kind for e in COLONY_ENDPOINTS}
    assert served == {path for path, kind in by_kind.items() if kind is not EndpointKind.INVALID}


def test_the_read_filters_cover_exactly_the_answering_endpoints_in_table_order() -> None:
    reads = [e.path for e in COLONY_ENDPOINTS if e.kind is EndpointKind.READ]
    assert list(READS) == reads
    assert set(READS) == ANSWERING


def colony_findings(found: Iterable[Diagnostic]) -> dict[str, str]:
    """``{target: code}`` of the ``colony_endpoint_*`` findings (the target is the message's
    third word: "edge endpoint <target> ...")."""
    return {d.message.split()[2]: d.code for d in found if d.code.startswith("colony_endpoint_")}


def test_the_loader_and_validate_warn_about_an_edge_exactly_when_its_colony_path_answers_nothing(
    make_tree: TreeFactory,
) -> None:
    targets = [concrete(e.path) for e in COLONY_ENDPOINTS] + [UNKNOWN]
    root: Path = make_tree({"main/config.json": hive(*({"from": ".", "to": t} for t in targets))})
    loaded = colony_findings(load_tree(root, cell_types={"code"}).diagnostics)
    validated = colony_findings(validate(root, cell_types={"code"}))
    assert loaded == validated
    expected = {
        concrete(e.path): code
        for e in COLONY_ENDPOINTS
        if (code := expected_warning(e.kind)) is not None
    }
    assert loaded == {**expected, UNKNOWN: "colony_endpoint_unknown"}


@pytest.mark.parametrize(
    ("path", "kind"),
    [(concrete(e.path), e.kind) for e in COLONY_ENDPOINTS] + [(UNKNOWN, EndpointKind.UNKNOWN)],
)
async def test_the_router_answers_a_message_exactly_when_its_colony_path_is_answering(
    make_tree: TreeFactory, path: str, kind: EndpointKind
) -> None:
    tree = make_tree({"main/config.json": hive()})
    async with ColonyHarness(tree, capture=["/sink"]) as colony:
        await colony.send(path, USER, reply_to="/sink")
        await colony.settle()
        letters = [d.error_code for d in await colony.dead_letters()]
        answers = colony.captured("/sink")
    if kind is EndpointKind.READ:
        assert letters == []
        [answer] = answers
        assert path.rsplit("/", 1)[-1] in answer.body
    elif kind is EndpointKind.INVALID:
        assert (letters, answers) == (["colony_endpoint_invalid"], [])
    else:
        assert (letters, answers) == (["colony_endpoint_unimplemented"], [])
