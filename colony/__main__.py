"""``python -m colony`` is the ``meclaw`` command."""

from colony.cli import main

main()
