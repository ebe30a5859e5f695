"""Persistence of the colony itself (``colony.db``); cells own their ``cell.db`` files, except
the tables a cell keeps in ``colony.db`` so its writes commit with its hand-offs (the store's).

* ``schema`` — tables, pragmas, the version check, and :func:`schema.probe` (a read-only
  verdict on a ``colony.db`` file, for boot and ``--validate``);
* ``db`` — :class:`db.ColonyDb`, the façade: hand-offs to the writer, fences, reads;
* ``items``, ``rows``, ``writer`` — what the writer's queue carries, the rows of one
  transaction (escaped by ``escape``), and the thread that commits them and handles failure;
* ``celltables`` — a cell's tables in ``colony.db`` (:mod:`colony.celltables`): writes on the
  writer's connection, reads on the loop;
* ``journal`` — the journal read a page at a time at boot;
* ``health`` — the writer's reports as log lines, and the file watched for deletion.
"""
