"""Pausing the cyclic garbage collector while a colony is built.

Loading and wiring a tree allocate only objects that live as long as the colony (parsed
configs, cells, mailboxes): a collection in the middle frees nothing, yet each full one walks
every object made so far, and building 10,000 cells triggered several. Reference counting
still frees whatever is dropped; only cycles wait until the pause ends.

Left where they were made, the objects would all sit in the youngest generation and the next
young collections would walk them anyway, three times over on their way up. So the pause
ends by moving them straight into the oldest one (``gc.freeze()`` then ``gc.unfreeze()``, two
list splices), where they are walked only when the collector next decides on a full
collection, as it does for any long-lived object.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block, or the decorated (synchronous) function; on
    the way out what exists is treated as old. Nests, and leaves a collector that was off as
    it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:  # never thaw what the process froze on purpose
                gc.freeze()
                gc.unfreeze()
            gc.enable()
