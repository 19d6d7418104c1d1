"""FlexA-Mem: a write-once memory for LLM agents and readers, rendered under any token budget."""

from flexamem.config import Settings
from flexamem.errors import (
    DuplicateUnitError,
    FlexaMemError,
    InvalidInputError,
    ModelUnavailableError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreError,
    WriteOnceError,
)
from flexamem.memory import Memory
from flexamem.notes import Fields, Note, Piece, Record, Step, Turn, UnitDraft
from flexamem.store import SQLiteStore, Store
from flexamem.tokens import count, counter
from flexamem.write.embed import Embedder, MiniLMEmbedder
from flexamem.write.records import RecordWriter, RuleWriter

__version__ = "0.1.0"

__all__ = [
    "DuplicateUnitError",
    "Embedder",
    "Fields",
    "FlexaMemError",
    "InvalidInputError",
    "Memory",
    "MiniLMEmbedder",
    "ModelUnavailableError",
    "Note",
    "Piece",
    "ReadOnlyStoreError",
    "Record",
    "RecordWriter",
    "RuleWriter",
    "SQLiteStore",
    "Settings",
    "Step",
    "Store",
    "StoreClosedError",
    "StoreError",
    "Turn",
    "UnitDraft",
    "WriteOnceError",
    "count",
    "counter",
]
