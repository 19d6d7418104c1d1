"""Rendering: a fresh memory for every call, under a hard token budget (SPEC sections 1, 3-5)."""
