"""What the wheel carries: every code package, the shipped topologies, the demo's corpus.

The whole wheel is built and run by ``.ci/wheel-demo`` (CI, ``make wheel-demo``); these are the
quick checks of the packaging configuration it relies on.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from colony import shipped

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def test_every_folder_of_python_code_is_a_package_the_wheel_lists() -> None:
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for top in ("colony", "cells", "scripted")
        for p in (REPO / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    missing = sorted(found - set(SETUPTOOLS["packages"]))
    assert missing == [], (
        f"add {missing} to [tool.setuptools] packages in pyproject.toml, or the wheel lacks them"
    )


def test_the_data_packages_are_the_project_folders_topologies_and_fixtures() -> None:
    assert SETUPTOOLS["package-dir"] == {
        "colony_topologies": "topologies",
        "colony_demo_data": "fixtures",
    }
    assert shipped.topologies().resolve() == (REPO / "topologies").resolve()
    assert shipped.search_corpus().resolve() == (REPO / "fixtures/search-corpus.json").resolve()


def test_every_file_a_shipped_topology_holds_is_of_a_kind_the_wheel_takes() -> None:
    patterns = SETUPTOOLS["package-data"]["colony_topologies"]
    tracked = [
        p
        for p in (REPO / "topologies").rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        # what a person running a topology in the checkout leaves there (.gitignore'd)
        and p.name != ".env"
        and p.suffix not in {".db", ".db-wal", ".db-shm", ".db-lease"}
        and p.name != "log.jsonl"
    ]
    left_out = sorted(
        str(p.relative_to(REPO))
        for p in tracked
        if not any(p.relative_to(REPO / "topologies").match(pat) for pat in patterns)
    )
    assert left_out == []


def test_a_filled_in_env_file_never_matches_what_the_wheel_takes() -> None:
    patterns = SETUPTOOLS["package-data"]["colony_topologies"]
    assert not any(Path("telegram-research/.env").match(pat) for pat in patterns)
    assert not any(Path("hello/colony.db").match(pat) for pat in patterns)


def test_the_license_is_an_spdx_expression_with_its_text_beside_it() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert "Apache License" in (REPO / "LICENSE").read_text(encoding="utf-8")[:200]


def test_a_shipped_topology_is_found_by_name() -> None:
    assert (shipped.topology("telegram-research") / "main" / "config.json").is_file()
