"""Recovering detail at read time with a fixed rule (no LLM): the BM25 index, unit and piece recovery."""
