"""An agent call's latency: ``AgentSession.context()`` right after each new step (prints figures).

Two histories: a coding agent's written here (150 steps: a command in a fenced block, 40 lines of
output each), and the real mini-swe-agent dev trajectories replayed step by step. Budget 32k for the
history by default; p50 / p95 over the calls where memory is on. Run it on an idle machine.

    python benchmarks/agent_latency.py [--budget 32768] [--steps 150] [--mode auto]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import flexamem as fm
from flexamem_bench.trajectories import load_trajectories

DATA = Path(__file__).resolve().parents[2] / "shared/data/agent_trajectories/mini_swe_agent"


def figures(ms: list[float]) -> str:
    if not ms:
        return "no call with memory on"
    ordered = sorted(ms)
    p95 = ordered[min(int(0.95 * len(ordered)), len(ordered) - 1)]
    return f"p50 {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms over {len(ms)} calls"


def written(budget: int, steps: int, mode: str) -> list[float]:
    agent = fm.Memory(":memory:").agent(task="Fix the failing test in src/app/models.py", budget=budget)
    ms = []
    for i in range(steps):
        output = "\n".join(f"{i + j:5d}\tvalue_{i * j} = compute(record_{j}, limit={i + j})" for j in range(40))
        agent.step(action=f"THOUGHT: look further.\n\n```bash\nnl -ba src/app/models.py | sed -n '{i},{i + 40}p'\n```",
                   observation=output)  # fmt: skip
        start = time.perf_counter()
        ctx = agent.context(mode=mode)
        if not ctx.pass_through:
            ms.append((time.perf_counter() - start) * 1000)
    return ms


def replayed(path: Path, budget: int, mode: str) -> list[float]:
    ms = []
    for traj in load_trajectories(path):
        agent = fm.Memory(":memory:").agent(task=traj.task, budget=budget, system=traj.system)
        for step in traj.steps:
            agent.step(action=step.action, observation=step.observation, messages=step.messages)
            start = time.perf_counter()
            ctx = agent.context(mode=mode)
            if not ctx.pass_through:
                ms.append((time.perf_counter() - start) * 1000)
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--data", default=str(DATA))
    args = parser.parse_args()
    print(f"written history, {args.steps} steps, budget {args.budget}, {args.mode}: "
          f"{figures(written(args.budget, args.steps, args.mode))}")  # fmt: skip
    for name in ("gemini-3-pro-dev.json", "deepseek-chat-dev.json"):
        path = Path(args.data) / name
        if path.exists():
            print(f"{name}, budget {args.budget}, {args.mode}: {figures(replayed(path, args.budget, args.mode))}")


if __name__ == "__main__":
    main()
