"""The colony's database on PostgreSQL: what several daemons share (``colony.json``
``cluster``). The same writer loop, units and rows as ``colony.db`` (:mod:`colony.persist`),
on psycopg 3: sync on the writer thread, where the group commit and a store's writes inside
the hand-off's transaction work exactly as on SQLite; async on the event loop for claims,
leases and LISTEN."""
