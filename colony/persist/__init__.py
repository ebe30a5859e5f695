"""Persistence of the colony itself (``colony.db``); cells own their ``cell.db`` files."""
