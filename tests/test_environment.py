"""The environment variables meshlift reads are one table (``meshlift._env``), printed in
docs/usage/environment.md: code that names a ``MESHLIFT_*`` variable outside the table fails here, as does a
page that differs from the table, a direct ``os.environ`` read that bypasses it, and the deprecated variables
keep working (with one warning) through the config fields' machinery."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from meshlift import _env
from meshlift.errors import ConfigError, RenderError

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "usage" / "environment.md"
NAME = re.compile(r"\bMESHLIFT_[A-Z0-9_]*[A-Z0-9]\b")
#: Dated logs of past runs: they quote the variables of their day.
HISTORY = {"docs/benchmarks.md"}
#: Pages that name the deprecated and removed variables (to say what replaced them).
ABOUT_OLD_NAMES = {"docs/usage/environment.md", "docs/doctor.md"}


def _code_files():
    for folder, suffixes in (("src", (".py",)), ("tests", (".py", ".js", ".html")), ("benchmarks", (".py", ".sh"))):
        for p in sorted((REPO / folder).rglob("*")):
            if p.is_file() and p.suffix in suffixes:
                yield p
    yield REPO / ".ci" / "run"


def _names_in(path: Path) -> set[str]:
    return set(NAME.findall(path.read_text(encoding="utf-8", errors="replace")))


def _page_table(heading: str) -> list[list[str]]:
    """Rows (cells, backticks stripped) of the first table after ``## heading`` in the page."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[c.strip().strip("`") for c in r.strip("|").split("|")] for r in rows]


def test_the_page_prints_the_table_of_the_code():
    scope = {"run": "a run", "app": "the web app", "tests": "tests, benchmarks"}
    want = [[v.name, scope[v.scope], v.default, v.what] for v in _env.VARIABLES.values()]
    assert _page_table("The variables") == want
    assert _page_table("Deprecated") == [[k, w] for k, w in _env.DEPRECATED.items()]
    assert _page_table("Removed") == [[k, w] for k, w in _env.REMOVED.items()]
    assert not set(_env.VARIABLES) & (set(_env.DEPRECATED) | set(_env.REMOVED))


def test_code_names_only_variables_of_the_table():
    allowed = set(_env.VARIABLES) | set(_env.DEPRECATED)
    bad = {}
    for path in _code_files():
        rel = path.relative_to(REPO).as_posix()
        ok = allowed | (set(_env.REMOVED) if rel.startswith("tests/") or rel == "src/meshlift/_env.py" else set())
        extra = _names_in(path) - ok
        if extra:
            bad[rel] = sorted(extra)
    assert not bad, ("MESHLIFT_* names outside meshlift._env.VARIABLES (add them to the table and to "
                     f"docs/usage/environment.md, or make them config fields): {bad}")


def test_src_reads_meshlift_variables_only_through_the_table():
    direct = re.compile(r"(environ(\.get)?\s*[\[(]|getenv\()\s*[\"']MESHLIFT_")
    offenders = [p.relative_to(REPO).as_posix() for p in (REPO / "src").rglob("*.py")
                 if p.name != "_env.py" and direct.search(p.read_text(encoding="utf-8"))]
    assert not offenders, f"read MESHLIFT_* variables with meshlift._env.get: {offenders}"


def test_docs_name_only_variables_of_the_page():
    known = set(_env.VARIABLES) | set(_env.DEPRECATED) | set(_env.REMOVED)
    pages = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))
    bad = {}
    for p in pages:
        rel = p.relative_to(REPO).as_posix()
        if rel in HISTORY:
            continue
        names = _names_in(p)
        extra = names - (known if rel in ABOUT_OLD_NAMES else set(_env.VARIABLES))
        if extra:
            bad[rel] = sorted(extra)
    assert not bad, f"pages naming variables that are not in docs/usage/environment.md's table: {bad}"


def test_get_refuses_a_name_outside_the_table():
    assert _env.get("MESHLIFT_NUM_THREADS", {"MESHLIFT_NUM_THREADS": " 3 "}) == "3"
    assert _env.get("MESHLIFT_NUM_THREADS", {"MESHLIFT_NUM_THREADS": ""}) is None
    nope = "MESHLIFT_" + "NOPE"  # (spelled in two pieces: this file is scanned for names too)
    with pytest.raises(ConfigError, match=f"'{nope}' is not in meshlift._env.VARIABLES"):
        _env.get(nope, {})
    with pytest.raises(ConfigError, match="not a deprecated"):
        _env.deprecated("MESHLIFT_NUM_THREADS", {})


def test_meshlift_variables_sorts_and_classifies():
    typo = "MESHLIFT_" + "NUM_THREAD"
    env = {"MESHLIFT_NUM_THREADS": "2", "MESHLIFT_RASTER_BACKEND": "torch", "MESHLIFT_MAX_FRAGMENTS": "9",
           typo: "2", "PATH": "/bin"}
    assert _env.meshlift_variables(env) == [
        ("MESHLIFT_MAX_FRAGMENTS", "9", "removed"), (typo, "2", "unknown"),
        ("MESHLIFT_NUM_THREADS", "2", "known"), ("MESHLIFT_RASTER_BACKEND", "torch", "deprecated")]


def test_deprecated_backend_variables_set_the_default_choice_with_one_warning(monkeypatch):
    import torch

    from meshlift.kernels import choose_backend, kernel_choice, use_kernels

    monkeypatch.setattr(_env, "_WARNED", set())
    monkeypatch.setenv("MESHLIFT_SHADING_BACKEND", "TORCH")
    with pytest.warns(FutureWarning, match="MESHLIFT_SHADING_BACKEND is deprecated.*shading_backend"):
        assert kernel_choice().shading == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        assert choose_backend("shading", None, "cpu") == "torch"
        with use_kernels(shading="auto"):  # code (a config field) wins over the variable
            assert kernel_choice().shading == "auto"
    monkeypatch.setenv("MESHLIFT_RASTER_BACKEND", "fast")
    with pytest.warns(FutureWarning), pytest.raises(RenderError, match="unknown raster backend 'fast' \\(the deprecated "
                                                                       "environment variable MESHLIFT_RASTER_BACKEND"):
        choose_backend("raster", None, "cpu")
    monkeypatch.delenv("MESHLIFT_RASTER_BACKEND")
    monkeypatch.delenv("MESHLIFT_SHADING_BACKEND")
    assert kernel_choice().shading == "auto" and choose_backend("raster", None, torch.device("cpu")) == "torch"
