"""The house rules on imports, checked by ``make lint`` (exit 1 with one line per breach):

1. Nothing in ``flexamem`` imports the bench (``flexamem_bench``); the CLI finds it by name, as a plug-in.
2. The bench imports no underscore name of ``flexamem`` (what it needs is public and documented).
3. Layers: a module of ``flexamem`` imports only from its own layer or the ones below it.
4. No import circle anywhere in ``src/`` (imports inside functions count too).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# lowest first; a module's layer is the first prefix that names it
LAYERS: list[tuple[str, ...]] = [
    ("flexamem.errors", "flexamem.knobs", "flexamem.tokens", "flexamem.text", "flexamem.notes", "flexamem.budget",
     "flexamem.chat", "flexamem.digests", "flexamem.names", "flexamem.telemetry"),
    ("flexamem.store", "flexamem.write", "flexamem.llm", "flexamem.recover", "flexamem.history",
     "flexamem.render.format", "flexamem.config", "flexamem.profiles"),
    ("flexamem.render",),
    ("flexamem.core",),
    ("flexamem.memory", "flexamem.agent"),
    ("flexamem",),  # the doors: cli*, demo, server, mcp_server, adapters, the package itself
]  # fmt: skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            if prefixes == ("flexamem",) and module != "flexamem" and i != len(LAYERS) - 1:
                continue
            return i
    return len(LAYERS) - 1


def imports(path: Path, module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import of the file, lazy ones included,
    except those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            names = [a.name for a in node.names]
            folder = SRC / Path(*base.split("."))
            submodules = [n for n in names if (folder / f"{n}.py").exists() or (folder / n).is_dir()]
            if len(submodules) < len(names):  # ``from flexamem.render import format`` names a module only
                out.append((base, [n for n in names if n not in submodules], node.lineno))
            out += [(f"{base}.{n}", [], node.lineno) for n in submodules]
    return out


def known(name: str, modules: set[str]) -> str | None:
    """The project module an import names (the longest known prefix), or None for a third party."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def main() -> int:
    files = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
    modules = set(files)
    problems: list[str] = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in files.items():
        where = path.relative_to(SRC.parent)
        for target, names, line in imports(path, module):
            dep = known(target, modules)
            if dep is None or dep == module:
                continue
            graph[module].add(dep)
            in_product = module == "flexamem" or module.startswith("flexamem.")
            if in_product and dep.startswith("flexamem_bench"):
                problems.append(f"{where}:{line}: the product imports the bench ({dep})")
            if (
                module.startswith("flexamem_bench")
                and dep.startswith("flexamem")
                and not dep.startswith("flexamem_bench")
            ):
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                private += [p for p in target.split(".") if p.startswith("_") and not p.startswith("__")]
                if private:
                    problems.append(f"{where}:{line}: the bench imports private names of {dep}: {private}")
            if in_product and (dep == "flexamem" or dep.startswith("flexamem.")) and layer(dep) > layer(module):
                problems.append(f"{where}:{line}: {module} (layer {layer(module)}) imports {dep} (layer {layer(dep)})")
    problems += [f"import circle: {' -> '.join(c)}" for c in circles(graph)]
    for p in problems:
        print(p)
    print(f"check_layers: {len(files)} modules, {sum(map(len, graph.values()))} imports, {len(problems)} problem(s)")
    return 1 if problems else 0


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
