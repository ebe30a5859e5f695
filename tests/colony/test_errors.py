"""The kernel's exceptions form one tree under ColonyError (the tree is drawn in colony.errors)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import colony
from colony.api_models import BodyRefused
from colony.errors import ColonyError
from colony.expressions import EngineUnavailableError
from colony.jsonwire import JsonRefused
from colony.operations import UnknownCellError
from colony.queries import QueryError

NOT_YET: set[str] = set()
"""Public exceptions still outside the tree; each name here must really be outside it, so the
exemption goes when the class joins (its subclasses follow it)."""


def public_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class a ``colony`` module defines under a public name."""
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(colony.__path__, "colony."):
        if module_info.name.endswith("__main__"):
            continue  # importing it runs the CLI
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_public_kernel_exception_is_a_colony_error() -> None:
    found = public_exceptions()
    assert "colony.lease.LeaseHeldError" in found  # the walk reached the modules
    pending = {found[name] for name in NOT_YET}
    outside = sorted(
        name
        for name, cls in found.items()
        if not issubclass(cls, ColonyError) and not any(issubclass(cls, p) for p in pending)
    )
    assert outside == []
    assert [name for name in NOT_YET if issubclass(found[name], ColonyError)] == []


def test_every_colony_error_says_what_went_wrong_in_a_code_of_its_own() -> None:
    generic = sorted(
        name
        for name, cls in public_exceptions().items()
        if issubclass(cls, ColonyError)
        and cls is not ColonyError
        and cls.code == ColonyError.code
        and "code" not in inspect.signature(cls.__init__).parameters  # given per instance
    )
    assert generic == []
    codes = [cls.code for cls in public_exceptions().values() if issubclass(cls, ColonyError)]
    assert all(re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", code) for code in codes), codes


def test_a_class_that_joined_the_tree_is_still_the_builtin_its_callers_catch() -> None:
    assert issubclass(JsonRefused, ValueError)
    assert issubclass(QueryError, ValueError)
    assert issubclass(BodyRefused, ValueError)
    assert issubclass(UnknownCellError, LookupError)
    assert issubclass(EngineUnavailableError, RuntimeError)
