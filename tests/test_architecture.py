"""The package's shape: layer order and no import cycles (read from src/ with ``ast``), file sizes, cheap import.

The layer table is the one in the docstring of ``src/meshlift/__init__.py``; every import counts, including
imports inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "meshlift"
MAX_LINES = 700


def _layer_table() -> dict[str, int]:
    """``{top-level name: layer}`` parsed from the package docstring (lines ``<layer>  <names>  <text>``)."""
    doc = ast.get_docstring(ast.parse((SRC / "__init__.py").read_text(encoding="utf-8"))) or ""
    table: dict[str, int] = {}
    for line in doc.splitlines():
        m = re.match(r"^\s+(\d+)\s{2}(\S+(?: \S+)*?)\s{2,}\S", line)
        if m:
            for name in m.group(2).split():
                table[name] = int(m.group(1))
    return table


def _modules() -> dict[str, Path]:
    mods = {}
    for p in SRC.rglob("*.py"):
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the meshlift modules it imports (``from pkg import sub`` resolves to ``pkg.sub``)."""

    def known(name: str) -> str:
        while name not in mods and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(known(a.name) for a in node.names if a.name.split(".")[0] == "meshlift")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                if src.split(".")[0] != "meshlift":
                    continue
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    targets.add(sub if sub in mods else known(src))
        targets.discard(mod)
        edges[mod] = targets
    return edges


def _top(mod: str) -> str:
    return mod.split(".")[1] if "." in mod else "meshlift"


def test_layer_table_covers_every_top_level_module():
    table = _layer_table()
    assert len(set(table.values())) >= 5, f"layer table not found in the package docstring: {table}"
    tops = {_top(m) for m in _modules()} - {"meshlift"}
    assert sorted(tops - set(table)) == [], "add these to the layer table in src/meshlift/__init__.py"


def test_no_module_imports_a_higher_layer():
    table = _layer_table()
    bad = []
    for mod, targets in _imports(_modules()).items():
        if _top(mod) == "meshlift":
            continue
        for t in targets:
            if _top(t) != "meshlift" and table[_top(t)] > table[_top(mod)]:
                bad.append(f"{mod} (layer {table[_top(mod)]}) imports {t} (layer {table[_top(t)]})")
    assert bad == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_imports(_modules())) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_source_file_is_longer_than_the_limit():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"split these files (at most {MAX_LINES} lines each)"


def test_light_modules_do_not_import_torch():
    light = ("meshlift", "meshlift.config", "meshlift._deps", "meshlift.errors")
    code = f"import sys, {', '.join(light)}; sys.exit(1 if 'torch' in sys.modules else 0)"
    r = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(SRC.parent)},
                       capture_output=True, text=True)
    assert r.returncode == 0, f"importing {light} imports torch: {r.stderr}"
