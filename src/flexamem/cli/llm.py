"""Command-line parts about the model writer: choosing it, listing flagged units, token accounting.

``--writer auto`` (the default) uses the model configured by ``FLEXAMEM_LLM_*`` or a config file
(:mod:`flexamem.llm.config`) and the rule writer when none is; the key is never printed.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import TYPE_CHECKING

from flexamem.errors import InvalidInputError
from flexamem.llm.config import load_config
from flexamem.store.sqlite import SQLiteStore
from flexamem.write.records import RecordWriter, RuleWriter

if TYPE_CHECKING:
    from flexamem.llm.client import ChatModel


def add_writer_arguments(p: argparse.ArgumentParser, default: str = "auto") -> None:
    p.add_argument(
        "--writer",
        choices=["auto", "rule", "llm"],
        default=default,
        help="who writes records: 'llm' = the configured endpoint, 'rule' = offline rules, 'auto' = llm if configured",
    )
    p.add_argument("--config", help="TOML file with an [llm] table (else $FLEXAMEM_CONFIG; env vars win)")


def writer_from_args(args: argparse.Namespace) -> RecordWriter:
    if args.writer == "rule":
        return RuleWriter()
    config = load_config(path=args.config)
    if config is None:
        if args.writer == "llm":
            raise InvalidInputError("--writer llm needs FLEXAMEM_LLM_BASE_URL and FLEXAMEM_LLM_MODEL (or --config)")
        return RuleWriter()
    from flexamem.write.llm_writer import LLMWriter

    print(f"flexamem: records by {config!r}", file=sys.stderr)
    return LLMWriter(config.client())


def required_model(args: argparse.Namespace, who: str, alternative: str = "") -> ChatModel:
    """The configured endpoint's client for ``who`` (an error naming what to set when there is none)."""
    config = load_config(path=args.config)
    if config is None:
        raise InvalidInputError(
            f"{who} needs an endpoint: FLEXAMEM_LLM_BASE_URL and FLEXAMEM_LLM_MODEL (or --config){alternative}"
        )
    print(f"flexamem: {who}: {config!r}", file=sys.stderr)
    return config.client()


def cmd_flagged(args: argparse.Namespace) -> int:
    """Units (and merged records) whose preferred writer failed, with the reason."""
    store = SQLiteStore(args.db, read_only=True)
    lines = []
    histories = [args.history] if args.history else [h for h, _ in store.histories()]
    for history in histories:
        for note in store.load_notes(history):
            if note.flagged:
                lines.append(f"{history}\t{note.unit_id}\twriter={note.writer}\t{note.flag_reason or ''}")
        for m in store.load_merged(history):
            if m.flagged:
                lines.append(f"{history}\tmerged {m.first}..{m.last} (level {m.level})\twriter={m.writer}")
    store.close()
    print("\n".join(lines) if lines else "no flagged units")
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    """Model tokens spent on memory per history (and per unit with --units), like the paper's Table 14."""
    store = SQLiteStore(args.db, read_only=True)
    histories = [args.history] if args.history else [h for h, _ in store.histories()]
    print("history\tpurpose\tcalls\tprompt_tokens\tcompletion_tokens\tcached_calls")
    for history in histories:
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        per_unit: dict[int | None, int] = defaultdict(int)
        for call in store.llm_calls(history):
            t = totals[call.purpose]
            if call.cached:
                t[3] += 1
                continue
            t[0] += 1
            t[1] += call.prompt_tokens
            t[2] += call.completion_tokens
            per_unit[call.seq] += call.prompt_tokens + call.completion_tokens
        for purpose, (n, prompt, completion, cached) in sorted(totals.items()):
            print(f"{history}\t{purpose}\t{n}\t{prompt}\t{completion}\t{cached}")
        if totals:
            all_p = sum(t[1] for t in totals.values())
            all_c = sum(t[2] for t in totals.values())
            print(
                f"{history}\tall\t{sum(t[0] for t in totals.values())}\t{all_p}\t{all_c}\t"
                f"{sum(t[3] for t in totals.values())}"
            )
        if args.units:
            notes = {n.seq: n.unit_id for n in store.load_notes(history)}
            for seq, tokens in sorted(per_unit.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
                print(f"{history}\t  {notes.get(seq, '-') if seq is not None else '-'}\t{tokens} tokens")
    store.close()
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("flagged", help="list units whose model-written record failed (rule-written instead)")
    p.add_argument("--db", required=True)
    p.add_argument("--history", help="one history (default: all)")
    p.set_defaults(func=cmd_flagged)
    p = sub.add_parser("usage", help="model tokens spent on memory construction, per history (and unit)")
    p.add_argument("--db", required=True)
    p.add_argument("--history", help="one history (default: all)")
    p.add_argument("--units", action="store_true", help="also tokens per unit")
    p.set_defaults(func=cmd_usage)
