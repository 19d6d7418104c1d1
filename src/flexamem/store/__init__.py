"""The write-once store: the ``Store`` seam and its SQLite default."""

from flexamem.store.base import MergedRecord, Store
from flexamem.store.sqlite import SQLiteStore

__all__ = ["MergedRecord", "SQLiteStore", "Store"]
