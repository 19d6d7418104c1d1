"""The LLM-built baselines on LoCoMo development data with the local llama.cpp model (prints the table).

Starts the local model's server (scripts/setup_local_llm.sh installs it), points FLEXAMEM_LLM_* at it,
and runs ``flexamem eval locomo`` on the first conversation for the baselines beside FlexA-Mem, with a
response cache so a rerun costs nothing. With a stronger endpoint, run the printed command yourself.

    python benchmarks/baselines_local.py [--questions 40] [--out results/baselines-local]
    python benchmarks/baselines_local.py --only-swe 2     # the coding-agent replay alone
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
from pathlib import Path

from flexamem.cli import main as flexamem
from flexamem.llm.local import LocalServer, local_model_path
from flexamem_bench.conversation_data import default_path

TRAJECTORY_METHODS = "a-mem,a-mem-fod,summary-a-mem,afm,readagent,memgas,sculptor,auto,unit-recovery"
SWE_METHODS = "summary-a-mem,auto,unit-recovery,masking,truncation"  # the condenser-style summary beside ours
METHODS = "a-mem,a-mem-fod,summary-a-mem,afm,readagent,memgas,sculptor,auto,unit-recovery,piece-recovery,unit-retrieval"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(default_path()))
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--budgets", default="2048,4096,8192")
    parser.add_argument("--out", default="results/baselines-local")
    parser.add_argument(
        "--trajectories", type=int, default=0, help="also replay the first N tau-bench dev trajectories"
    )
    parser.add_argument(
        "--swe", type=int, default=0, help="also replay the first N mini-swe-agent (text actions) dev trajectories"
    )
    parser.add_argument("--only-swe", type=int, default=0, help="replay N mini-swe-agent trajectories, nothing else")
    args = parser.parse_args()
    command = [
        "eval", "locomo", "--data", args.data, "--limit", "1", "--questions", str(args.questions),
        "--methods", METHODS, "--budgets", args.budgets, "--out", args.out, "--resamples", "2000",
    ]  # fmt: skip
    print("with a stronger endpoint: FLEXAMEM_LLM_BASE_URL=... FLEXAMEM_LLM_MODEL=... flexamem", shlex.join(command))
    cache = Path(args.out) / "llm-cache.db"
    cache.parent.mkdir(parents=True, exist_ok=True)
    # room for an 8k memory in the model's own tokens (Qwen's tokenizer counts more than o200k) and the tools
    with LocalServer(local_model_path(), n_ctx=12288) as server:
        os.environ.update(
            FLEXAMEM_LLM_BASE_URL=server.base_url,
            FLEXAMEM_LLM_MODEL="qwen2.5-coder-0.5b-instruct",
            FLEXAMEM_LLM_CACHE=str(cache),
        )
        start = time.perf_counter()
        if args.only_swe:
            args.swe, args.trajectories = args.only_swe, 0
        else:
            code = flexamem(command)
            print(f"done in {time.perf_counter() - start:.0f} s (exit {code})")
        trajectories = Path(args.data).resolve().parents[1] / "agent_trajectories"
        if args.trajectories:
            replay(trajectories / "tau_bench/gpt-4o-airline-dev.json", args.trajectories, "2048",
                   TRAJECTORY_METHODS, args.out + "-trajectories")  # fmt: skip
        if args.swe:
            replay(
                trajectories / "mini_swe_agent/gemini-3-pro-dev.json", args.swe, "8000", SWE_METHODS, args.out + "-swe"
            )
        print(f"all done after {time.perf_counter() - start:.0f} s")


def replay(data: Path, limit: int, budgets: str, methods: str, out: str) -> None:
    """``flexamem eval trajectories`` on the first ``limit`` runs of ``data`` (history budgets)."""
    command = [
        "eval", "trajectories", "--data", str(data), "--limit", str(limit), "--budgets", budgets,
        "--budget-part", "history", "--methods", methods, "--out", out, "--resamples", "2000",
    ]  # fmt: skip
    print("flexamem", shlex.join(command))
    print(f"exit {flexamem(command)}")


if __name__ == "__main__":
    main()
