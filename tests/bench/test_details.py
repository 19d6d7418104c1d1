"""The replay's detail extractors, on strings written here."""

from flexamem_bench.details import (
    commands_of,
    details_of,
    displays_in,
    listed_paths,
    occurs,
    readable,
    shown_displays,
)


def test_each_kind_of_detail_is_extracted() -> None:
    assert "django/db/models/sql/query.py" in details_of("sed -n '1570,1620p' django/db/models/sql/query.py")
    assert {"1570,1620", "1570", "1620"} <= set(details_of("sed -n 1570,1620p q.py"))  # a line range
    assert "src/app/views.py:118" in details_of("vim src/app/views.py:118")  # path:line
    assert "self.table_alias" in details_of("print(self.table_alias)")  # a dotted name
    assert {"reuse_alias", "FilteredRelation"} <= set(details_of("x = reuse_alias or FilteredRelation()"))
    assert "tests/test_views.py::test_redirect[slash]" in details_of("pytest tests/test_views.py::test_redirect[slash]")
    quoted = details_of('grep -rn "database is locked" django/')
    assert "database is locked" in quoted
    assert "4417" in details_of("kill 4417") and "42" not in details_of("echo 42")  # numbers of 3+ digits
    # words that are no names of code are no details
    assert details_of("ls -la && echo done") == []


def test_parts_of_a_path_are_not_details_of_their_own() -> None:
    found = details_of("cat django/db/models/query_utils.py")
    assert found == ["django/db/models/query_utils.py"]


def test_commands_sit_in_fenced_blocks_or_tool_arguments() -> None:
    text_action = {
        "role": "assistant",
        "content": "THOUGHT: look at the parser_state.\n\n```python\nnot_a_command()\n```\n```bash\nnl -ba a/b.py\n```",
    }
    assert commands_of([text_action]) == ["nl -ba a/b.py"]  # reasoning and other fences are no command
    call = {
        "role": "assistant",
        "content": "I will look.",
        "tool_calls": [{"id": "c", "function": {"name": "bash", "arguments": '{"command": "cat x.py"}'}}],
    }
    assert commands_of([call, {"role": "tool", "content": "cat y.py"}]) == ["cat x.py"]
    broken = {"role": "assistant", "tool_calls": [{"function": {"name": "bash", "arguments": "cat {"}}]}
    assert commands_of([broken]) == ["cat {"]


def test_occurs_needs_clean_ends_and_reads_json_escapes() -> None:
    assert occurs("120", "lines 120-140") and not occurs("120", "line 11203")
    assert not occurs("test_x", "my_test_x") and occurs("database is locked", 'error: "database is locked"')
    assert occurs('grep "a b"', readable('{"command": "grep \\"a b\\" x"}'))


def test_displays_and_listings() -> None:
    assert displays_in("cd /testbed && cat ./setup.py | head -5") == [("setup.py", "cat ./setup.py")]
    assert displays_in("sed -n '10,20p' a/b.py")[0][0] == "a/b.py"
    assert displays_in("sed -i 's/a/b/' a/b.py") == []  # an edit is no display
    assert displays_in("cat <<'EOF' > new.py") == [] and displays_in("cat a.py > b.py") == []  # writes
    assert displays_in("str_replace_editor view /testbed/pkg/m.py") == [
        ("pkg/m.py", "str_replace_editor view /testbed/pkg/m.py")
    ]
    assert displays_in("grep -n foo a.py") == []
    assert listed_paths("pkg/a.py:12: def f\n./tests/t_b.py\nREADME\n  docs/x.txt\n") == [
        "pkg/a.py",
        "tests/t_b.py",
        "docs/x.txt",
    ]
    shown = shown_displays('step 4: bash({"command": "nl -ba pkg/a.py | sed -n 1,9p"}) -> ok\n[step 9] head -n 3 q.cfg')
    assert shown == {"pkg/a.py", "q.cfg"}
