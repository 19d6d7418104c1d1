"""The paper's LLM-built baselines (A-Mem, A-Mem with fit-or-degrade, Summary+A-Mem, AFM, ReadAgent,
MemGAS, Sculptor), written from their descriptions, run through any
:class:`~flexamem.llm.client.ChatModel` (Sculptor: a :class:`~flexamem.llm.client.ToolModel`); and
:class:`StandInModel`, a deterministic model for tests (no network). See docs/BASELINES.md."""

from flexamem_bench.baselines.ledger import Ledger
from flexamem_bench.baselines.stand_in import StandInModel

__all__ = ["Ledger", "StandInModel"]
