import json
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.cli import main
from flexamem_bench.agent_harness import replay, run_trajectories, summarise_trajectories
from flexamem_bench.harness import load_rows
from flexamem_bench.replay import AGENT_METHODS, measure_step
from flexamem_bench.trajectories import load_trajectories


def tau2_file(tmp_path: Path, n_steps: int = 14, big: bool = False) -> Path:
    messages = [
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "Please cancel reservation ZX81QP for user mia_li_3668."},
    ]
    for i in range(n_steps):
        call_id = f"c{i}"
        args = {"user_id": "mia_li_3668"} if i % 3 == 0 else {"reservation_id": "ZX81QP", "page": i}
        if i == n_steps - 1:
            args = {"reservation_id": "ZX81QP", "refund_to": "credit_card_4421", "voucher": "VCH-55210"}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "name": "get_details" if i < n_steps - 1 else "cancel",
                        "arguments": args,
                        "requestor": "assistant",
                    }
                ],
            }
        )
        output = json.dumps(
            {
                "payment_methods": ["credit_card_4421"],
                "rows": [f"row {i}-{j}" for j in range(40)],
                **({"voucher_id": "VCH-55210"} if i == 1 else {}),
            }
        )
        if big and i == 2:
            output = "x" * 2_100_000
        messages.append({"id": call_id, "role": "tool", "content": output if i != 5 else ""})
    data = {
        "info": {"environment_info": {"policy": "You are an airline agent. " * 30}},
        "simulations": [{"task_id": "7", "trial": 0, "messages": messages}],
    }
    path = tmp_path / "tau2.json"
    path.write_text(json.dumps(data))
    return path


def test_formats_are_read_into_steps(tmp_path: Path) -> None:
    [t] = load_trajectories(tau2_file(tmp_path))
    assert t.task.startswith("Please cancel reservation ZX81QP") and t.system.startswith("You are an airline agent")
    assert len(t.steps) == 14 and t.steps[0].calls[0].arguments == {"user_id": "mia_li_3668"}
    assert t.steps[5].observation == "(empty output)"
    tau = [
        {
            "task_id": 1,
            "trial": 0,
            "traj": [
                {"role": "system", "content": "policy"},
                {"role": "user", "content": "book a flight"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "search", "arguments": "{not json"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "[]"},
                {"role": "assistant", "content": "Anything else?"},
                {"role": "user", "content": "no"},
            ],
        }
    ]
    (tmp_path / "tau.json").write_text(json.dumps(tau))
    [t] = load_trajectories(tmp_path / "tau.json")
    assert (t.system, t.task, len(t.steps)) == ("policy", "book a flight", 2)
    assert t.steps[0].calls[0].arguments == "{not json" and "unparsable" in t.problems[0]
    assert t.steps[1].observation == "user: no"
    swe = {
        "trajectory": [
            {"action": "ls -la", "observation": "a.py b.py", "response": "Let me look."},
            {"action": "cat a.py", "observation": "print(1)"},
        ],
        "history": [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix issue 12"}],
    }
    (tmp_path / "run.traj").write_text(json.dumps(swe))
    [t] = load_trajectories(tmp_path / "run.traj")
    assert (t.system, t.task, [s.action for s in t.steps]) == ("You fix bugs.", "Fix issue 12", ["ls -la", "cat a.py"])
    mini = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "```bash\nls\n```"},
            {"role": "user", "content": "a.py"},
        ],
        "info": {},
    }
    (tmp_path / "mini.json").write_text(json.dumps(mini))
    [t] = load_trajectories(tmp_path / "mini.json", "mini-swe-agent")
    assert t.steps[0].action == "```bash\nls\n```" and t.steps[0].observation == "user: a.py"
    (tmp_path / "bad.json").write_text('[{"traj": 5}]')
    [t] = load_trajectories(tmp_path / "bad.json", "tau")
    assert not t.steps and "malformed" in t.problems[0]
    with pytest.raises(fm.InvalidInputError):
        load_trajectories(tmp_path / "missing.json")


@pytest.mark.slow
def test_a_2mb_output_is_kept_cut_and_reported(tmp_path: Path) -> None:
    [t] = load_trajectories(tau2_file(tmp_path, n_steps=4, big=True))
    assert any("cut" in p for p in t.problems)
    assert len(t.steps[2].observation) <= 200_100
    rows = [measure_step(t, s, c, m) for s, c, m, _ in replay(t, "masking", 1500) if c is not None]
    assert rows and all(r["within_budget"] for r in rows)


def test_replay_measures_and_budgets(tmp_path: Path) -> None:
    [t] = load_trajectories(tau2_file(tmp_path))
    for method in [m for m in AGENT_METHODS if not m.startswith("auto-")]:  # ablations: tests/render
        rows = [measure_step(t, step, ctx, m) for step, ctx, m, _ in replay(t, method, 1500) if ctx is not None]
        assert rows, method
        assert all(r["within_budget"] for r in rows), method
        assert all(0 <= r["trace_coverage"] <= 1 for r in rows)
        recalls = [r["detail_recall"] for r in rows if r["detail_recall"] is not None]
        if method == "full":
            assert recalls and all(x == 1.0 for x in recalls) and rows[-1]["trace_coverage"] == 1.0
        if method == "timeline-only":
            assert rows[-1]["trace_coverage"] == 1.0
    # the agent repeats get_details(user_id=...): whether the earlier result is visible is measured
    rows = [measure_step(t, s, c, m) for s, c, m, _ in replay(t, "full", 1500) if c is not None]
    assert any(r["repeat_visible"] is not None for r in rows)


def test_harness_resumes_and_cli_outputs(tmp_path: Path) -> None:
    path = tau2_file(tmp_path)
    out = tmp_path / "out"
    [t] = load_trajectories(path)
    run_trajectories([t], ["truncation"], [1500], out, progress=False)
    n = len(load_rows(out))
    run_trajectories([t], ["truncation"], [1500], out, progress=False)
    assert len(load_rows(out)) == n  # nothing redone
    # an interrupted replay (rows written, never finished) is dropped and run again whole
    rows_file, finished = out / "per_question.jsonl", out / "finished.jsonl"
    saved = [{k: v for k, v in r.items() if k != "latency_ms"} for r in load_rows(out)]
    finished.write_text("")
    rows_file.write_text("".join(rows_file.read_text().splitlines(keepends=True)[:2]))
    run_trajectories([t], ["truncation"], [1500], out, progress=False)
    assert [{k: v for k, v in r.items() if k != "latency_ms"} for r in load_rows(out)] == saved
    summarise_trajectories(out, resamples=100)
    rows = json.loads((out / "results.json").read_text())
    assert {r["measure"] for r in rows} >= {"detail_recall", "trace_coverage", "tokens", "latency_ms"}
    assert (
        main(
            [
                "eval",
                "trajectories",
                "--data",
                str(path),
                "--budgets",
                "1500",
                "--methods",
                "unit-recovery,masking",
                "--out",
                str(tmp_path / "cli"),
                "--resamples",
                "100",
                "--quiet",
            ]
        )
        == 0
    )
    assert (tmp_path / "cli" / "detail_recall.png").exists()
    assert main(["replay", str(path), "--step", "10", "--budget", "1500", "--method", "unit-recovery"]) == 0
    with pytest.raises(fm.InvalidInputError, match="unknown method"):
        run_trajectories([t], ["magic"], [1500], out, progress=False)


def swe_file(tmp_path: Path, n_steps: int = 24) -> Path:
    """A mini-swe-agent run written here: bash in fenced blocks, outputs as user messages, the closing
    ``exit`` mark of mini-swe-agent 2."""
    messages = [
        {"role": "system", "content": "You are a shell agent."},
        {"role": "user", "content": "Fix the failing test in tests/test_parse.py."},
    ]
    for i in range(n_steps):
        if i == 0:
            command, output = "find pkg -name '*.py'", "\n".join(f"pkg/mod_{j}.py" for j in range(12))
        elif i % 4 == 1:
            command = f"sed -n '1,40p' pkg/mod_{i}.py"
            output = "\n".join(f"def helper_{i}_{j}(parser_state): return parser_state.field_{i}" for j in range(40))
        elif i == n_steps - 1:
            command, output = "cat <<'EOF' > pkg/fix.py\nfrom pkg.mod_5 import helper_5_3\nEOF", ""
        else:
            command, output = f"python -c 'print({i})' && ls", "\n".join(f"noise line {i} {j}" for j in range(60))
        messages.append({"role": "assistant", "content": f"THOUGHT: step {i}.\n\n```bash\n{command}\n```"})
        messages.append({"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{output}\n</output>"})
    messages.append({"role": "exit", "content": "diff --git a/pkg/fix.py"})
    path = tmp_path / "swe.json"
    path.write_text(json.dumps([{"messages": messages}]))
    return path


def test_text_actions_are_measured(tmp_path: Path) -> None:
    [t] = load_trajectories(swe_file(tmp_path))
    assert not t.problems and all(m["role"] != "exit" for s in t.steps for m in s.messages)
    rows = {
        method: [measure_step(t, s, c, m) for s, c, m, _ in replay(t, method, 2500) if c is not None]
        for method in ("full", "auto", "masking", "auto-no-commands")
    }
    last = rows["full"][-1]
    assert last["detail_recall"] == 1.0 and last["file_shown"] == 1.0  # the final write reuses helper_5_3
    assert last["detail_recall_json"] is None  # no JSON arguments: the old measure is blind here
    for method, measured in rows.items():
        assert measured and all(r["within_budget"] for r in measured), method
        assert any(r["detail_recall"] is not None for r in measured), method
        assert any(r["file_shown"] is not None for r in measured), method
    shown = [r["file_shown"] for r in rows["auto"] if r["file_shown"] is not None]
    without = [r["file_shown"] for r in rows["auto-no-commands"] if r["file_shown"] is not None]
    assert min(shown) == 1.0 and sum(shown) > sum(without)  # the command trace shows every display
    # masking hides the outputs of text commands (user messages), not the commands
    *_, (_, ctx, _, _) = replay(t, "masking", 2500)
    assert ctx is not None and "[output omitted]" in json.dumps(ctx.messages)
    assert "sed -n '1,40p' pkg/mod_1.py" in json.dumps(ctx.messages)
