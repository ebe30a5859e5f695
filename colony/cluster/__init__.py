"""Several daemons sharing one colony (``colony.json`` ``cluster``; docs/cluster.md).

This package holds what every node must compute the same way without asking the others: which
partition a conversation belongs to (:mod:`~colony.cluster.partition`), what a DSN must look
like before anyone connects with it (:mod:`~colony.cluster.dsn`) and what a node may be called
(:mod:`~colony.cluster.node`).
"""
