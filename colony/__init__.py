"""The colony kernel: configuration, routing, the journal, supervision, the HTTP API.

Layering rule: the kernel never imports :mod:`cells` (cell types are handed to it as
:class:`colony.cell.CellType` values). Only the composition roots, which put a kernel and
cell types together, may: :mod:`colony.cli` (and ``python -m colony``), :mod:`colony.daemon`,
:mod:`colony.testing` and :mod:`colony.demo`. ``tests/colony/test_layering.py`` holds the rule.
"""

COMPOSITION_ROOTS = frozenset(
    {"colony.__main__", "colony.cli", "colony.daemon", "colony.testing", "colony.demo"}
)
"""The modules of this package allowed to import :mod:`cells`."""
