"""FlexA-Mem: a write-once memory for LLM agents and readers, rendered under any token budget."""

from flexamem.agent import AgentContext, AgentSession
from flexamem.client import ClientSettings, RemoteMemory
from flexamem.config import Settings, WriteSettingsWarning
from flexamem.digests import Head
from flexamem.errors import (
    BudgetError,
    ConcurrentWriteError,
    DuplicateUnitError,
    EmbeddingEndpointError,
    FlexaMemError,
    HistoryDroppedError,
    InvalidInputError,
    LLMError,
    LLMOutputError,
    ModelUnavailableError,
    NotFoundError,
    ReadOnlyStoreError,
    RequestConflictError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    UnauthorizedError,
    WriteOnceError,
)
from flexamem.llm import LLMConfig, OpenAICompatible, ResponseCache, RetryPolicy, load_config
from flexamem.memory import Memory, import_history
from flexamem.notes import Fields, Note, Piece, Record, Step, Turn, UnitDraft
from flexamem.render.renderer import ABLATIONS, RenderOptions
from flexamem.render.result import Rendering, UnitView
from flexamem.store import SQLiteStore, Store
from flexamem.store.base import Erasure
from flexamem.tokens import count, counter
from flexamem.write.embed import Embedder, MiniLMEmbedder
from flexamem.write.llm_writer import LLMWriter
from flexamem.write.records import RecordWriter, RuleWriter
from flexamem.write.remote_embed import EndpointEmbedder

__version__ = "0.1.0"

# What users need (the API on one screen). Everything else imported above stays reachable as
# ``flexamem.<name>`` for existing code, and from its own module.
__all__ = [
    "AgentContext",
    "AgentSession",
    "BudgetError",
    "ClientSettings",
    "ConcurrentWriteError",
    "DuplicateUnitError",
    "EmbeddingEndpointError",
    "EndpointEmbedder",
    "Erasure",
    "FlexaMemError",
    "Head",
    "HistoryDroppedError",
    "InvalidInputError",
    "LLMError",
    "LLMWriter",
    "Memory",
    "NotFoundError",
    "Note",
    "OpenAICompatible",
    "ReadOnlyStoreError",
    "RenderOptions",
    "Rendering",
    "RequestConflictError",
    "Settings",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
    "StoreUnavailableError",
    "UnauthorizedError",
    "WriteSettingsWarning",
    "count",
    "import_history",
    "load_config",
]
