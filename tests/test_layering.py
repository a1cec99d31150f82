"""The package layers, read from the source: each package imports only itself and the layers below it, and no
module imports itself back through others (no import cycles).

Every ``import`` and ``from ... import`` counts, at module level and inside functions alike (a function-level import
is still a dependency, only a later one), in every ``.py`` file under ``envs/``, ``rlpar/``, ``agents/`` and
``examples/``. ``from package import name`` counts as an import of ``package.name`` where that is a module, else of
``package``. Imports of other distributions (jax, gymnax, ...) are not part of the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "rlpar", "agents", "examples")

# Bottom first: a layer may import itself and the layers before it. A module belongs to the longest prefix that
# names it. rlpar/__init__.py (the package's map and version) is in no layer: any module may import it.
LAYERS = [
    ("envs", "environments, adapters, wrappers, and how a user's code failing is described"),
    ("rlpar.core", "the engine core on the devices: agent contract, collector, program, mapping, seeds"),
    ("rlpar.run", "the run shell on the host: run loop, checkpoints, logs, caches; make_train"),
    ("agents", "the agent library on the contract; each package's train is rlpar.run's"),
    ("rlpar.tools", "the commands: train, evaluate, plot, their flags, agent names, --resume"),
    ("rlpar.agent", "re-export of the contract at the path users' agents import"),
    ("rlpar.train", "re-export for python -m rlpar.train"),
    ("rlpar.evaluate", "re-export for python -m rlpar.evaluate and load_policy"),
    ("rlpar.plot", "re-export for python -m rlpar.plot"),
    ("examples", "a user's agent on the public API"),
]
# The re-exports stand for the public paths, not for layers: nothing in the packages imports them.
ENTRY_POINTS = ("rlpar.agent", "rlpar.train", "rlpar.evaluate", "rlpar.plot")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project's modules that ``name`` imports anywhere in its file."""
    def known(target: str) -> str | None:
        parts = target.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in modules:
                return ".".join(parts[:end])
        return None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        found |= {m for m in map(known, targets) if m is not None and m != name}
    return found


def _layer(module: str) -> int | None:
    matches = [i for i, (prefix, _) in enumerate(LAYERS) if module == prefix or module.startswith(prefix + ".")]
    return max(matches, key=lambda i: len(LAYERS[i][0])) if matches else None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_module_is_in_a_layer():
    assert [m for m in _graph() if m != "rlpar" and _layer(m) is None] == []


def test_each_layer_imports_only_itself_and_the_layers_below():
    graph = _graph()
    wrong = []
    for module, imported in sorted(graph.items()):
        layer = _layer(module)
        for target in sorted(imported):
            below = _layer(target)
            if target == "rlpar" or layer is None:
                continue
            if below > layer or (target in ENTRY_POINTS and not module.startswith("examples")):
                wrong.append(f"{module} ({LAYERS[layer][0]}) imports {target} ({LAYERS[below][0]})")
    assert wrong == []


def test_envs_imports_nothing_of_rlpar_or_agents():
    graph = _graph()
    assert sorted((m, t) for m, ts in graph.items() if m.split(".")[0] == "envs" for t in ts
                  if t.split(".")[0] != "envs") == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = counter[0]
                    counter[0] += 1
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    # a -> b -> c -> a and d -> a: one cycle of three; d is outside it
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
