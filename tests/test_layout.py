"""The layout holds: data flows one way, nothing is named where it does not belong.

* Every module of the package has a place in LAYERS, and imports only modules of its own layer
  or below it — imports inside functions included (that is where cycles used to hide).
* The import graph has no cycle, and every control-plane module imports alone.
* Rank-side code imports only the rank-side floor (protocol, errors, zoo, rankside, modes), and
  the code CNTK's Python 3.6 runs compiles there.
* A mode is one folder: no module outside ``orchestrator/modes/`` names a mode or imports its
  modules by their path (the registry is the way in); no module
  outside ``orchestrator/backends/`` (nor a template) compares a scheduler or launcher name.
* A container runtime is one class: outside its class (``orchestrator/containers/``) nothing
  compares a runtime name.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import containers, modes

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "orchestrator"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# The pipeline, ground floor first (docs/architecture.md): a module may import its own layer
# and below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("orchestrator", "orchestrator.errors", "orchestrator.protocol",
                "orchestrator.files", "orchestrator.resources", "orchestrator.zoo",
                "orchestrator.units", "orchestrator.jobscript", "orchestrator.yamlconf")),
    ("registries", ("orchestrator.modes", "orchestrator.backends", "orchestrator.containers")),
    ("specs", ("orchestrator.spec",)),
    ("config", ("orchestrator.site", "orchestrator.data")),
    ("plan", ("orchestrator.plan",)),
    ("render", ("orchestrator.render", "orchestrator.images")),
    ("runs", ("orchestrator.runs",)),
    ("results", ("orchestrator.results",)),
    ("model", ("orchestrator.perfmodel",)),
    ("execute", ("orchestrator.execute",)),
    ("analysis", ("orchestrator.report", "orchestrator.history")),
    ("cli", ("orchestrator.cli", "orchestrator.__main__")),
]
# What rank-side code may import from orch (it runs with any framework environment's Python).
RANK_FLOOR = ("orchestrator", "orchestrator.errors", "orchestrator.protocol", "orchestrator.zoo",
              "orchestrator.rankside", "orchestrator.modes")
# The code a CNTK rank imports: it must compile under Python 3.6.
PY36 = ("__init__.py", "errors.py", "protocol.py", "modes/__init__.py", "modes/base.py",
        "modes/cntk/mode.py", "modes/cntk/rank.py", "modes/cntk/__init__.py",
        "rankside/__init__.py", "rankside/harness.py", "rankside/cntk/models.py",
        "rankside/common/epochs.py", "rankside/cntk/epochs.py", "rankside/sampler.py",
        "rankside/energy.py", "rankside/binding.py", "rankside/sources.py",
        "rankside/cntk/__init__.py", "rankside/common/__init__.py")


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def is_rank_side(name: str) -> bool:
    return name.startswith("orchestrator.rankside") or bool(
        re.fullmatch(r"orchestrator\.modes\.\w+\.rank", name))


def imports_of(name: str, path: Path) -> set[str]:
    """Every orch module this file imports, wherever the import statement is."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("orchestrator"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if not target.startswith("orchestrator"):
                continue
            found.add(target)
            for alias in node.names:  # "from . import sweep" imports the module sweep
                if f"{target}.{alias.name}" in all_modules():
                    found.add(f"{target}.{alias.name}")
    found.discard(name)
    return found


def layer_of(name: str) -> int | None:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = name.startswith(prefix + ".") and prefix != "orchestrator"
            if (name == prefix or inside) and (
                    best is None or len(prefix) > len(best[1])):
                best = (index, prefix)
    return None if best is None else best[0]


def test_every_module_has_a_layer():
    missing = [n for n in all_modules() if not is_rank_side(n) and layer_of(n) is None]
    assert not missing, f"place these modules in LAYERS (tests/test_layout.py): {missing}"


def test_a_package_is_on_one_floor():
    """LAYERS places packages, never a module inside one: a package's folder is its floor, so
    the package import graph and the module import graph agree."""
    inside = [n for _, names in LAYERS for n in names if n.count(".") > 1]
    assert not inside, f"LAYERS places modules inside a package: {inside}"


def test_only_the_ground_floor_lives_directly_in_the_package():
    """A module directly in orchestrator/ is one every floor shares (at most ten of them):
    anything with a stage of its own lives in its stage's package."""
    flat = sorted(module_name(p) for p in PKG.glob("*.py"))
    above = [n for n in flat if n != "orchestrator.__main__" and layer_of(n) != 0]
    assert len(flat) <= 10, f"{len(flat)} modules directly in orchestrator/: {flat}"
    assert not above, f"directly in orchestrator/ but above the ground floor: {above}"


def test_no_module_imports_one_above_it():
    upward = []
    for name, path in all_modules().items():
        if is_rank_side(name):
            continue
        mine = layer_of(name)
        for target in imports_of(name, path):
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                upward.append(f"{name} ({LAYERS[mine][0]}) imports {target} "
                              f"({LAYERS[theirs][0]})")
    assert not upward, "imports against the flow:\n" + "\n".join(upward)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imported_from(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The orch module an ``ImportFrom`` in module ``name`` (file ``path``) names."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = package.split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def private_reach_ins(name: str, path: Path) -> list[str]:
    """Where a module uses a private name (``_x``) of an orch module outside the CLI package:
    ``from m import _x``, a ``_x`` segment in an imported module's path, or ``alias._x`` on a
    name an orch import bound. (The CLI's own helpers, orchestrator.cli._common, are its own.)"""
    tree = ast.parse(path.read_text())
    bound: dict[str, str] = {}  # local name -> the orch module it came from
    found = []

    def foreign(module: str) -> bool:
        return module.startswith("orchestrator") and not (
            module == "orchestrator.cli" or module.startswith("orchestrator.cli."))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if foreign(alias.name):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = _imported_from(node, name, path)
            if not foreign(module):
                continue
            if any(_private(part) for part in module.split(".")):
                found.append(f"{node.lineno}: from {module} import ...")
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {module} import {alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in bound):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr} "
                         f"({bound[node.value.id]})")
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{where}:{line}" for line in found]


def test_the_cli_uses_no_private_name_of_another_module():
    """The CLI parses and prints: what it needs of the model, the report or the runs is their
    public API, never a ``_name`` it would break with."""
    found = []
    for name, path in all_modules().items():
        if name == "orchestrator.cli" or name.startswith("orchestrator.cli."):
            found += private_reach_ins(name, path)
    assert not found, "private names used by the CLI:\n" + "\n".join(found)


def test_the_private_name_check_sees_each_kind_of_reach_in(tmp_path):
    fake = tmp_path / "cmd.py"
    fake.write_text("from .. import report as rep\nfrom ..report import _fmt\n"
                    "import orchestrator.perfmodel._x\nfrom ._common import _helper\n"
                    "def f():\n    return rep._num(1)\n")
    found = private_reach_ins("orchestrator.cli.cmd", fake)
    text = "\n".join(found)
    assert len(found) == 3, found  # the CLI's own _common is not a reach-in
    for reach_in in ("import _fmt", "import orchestrator.perfmodel._x", "rep._num"):
        assert reach_in in text, found


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node of ``graph`` (Tarjan's), each
    sorted: its import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_import_graph_has_no_cycle():
    graph = {name: imports_of(name, path) for name, path in all_modules().items()}
    # Package __init__ files that only re-export their submodules are not part of a cycle
    # through them (importing a submodule runs its package first); drop the edges from a
    # submodule to its own package.
    for name, targets in graph.items():
        targets -= {t for t in set(targets) if name.startswith(t + ".")}
    cycles = cycles_of(graph)
    assert not cycles, f"import cycles: {cycles}"


def test_every_control_plane_module_imports_alone():
    """Each module imported in a fresh interpreter state: none relies on another having been
    imported first (the symptom of a cycle broken by an import inside a function)."""
    names = [n for n in all_modules() if not is_rank_side(n) and n != "orchestrator.__main__"]
    script = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('orchestrator')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
        "heavy = [m for m in ('torch', 'tensorflow', 'mxnet', 'cntk', 'chainer') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_rank_side_imports_only_the_rank_floor():
    bad = []
    for name, path in all_modules().items():
        if not is_rank_side(name):
            continue
        for target in imports_of(name, path):
            if not any(target == f or target.startswith(f + ".") for f in RANK_FLOOR):
                bad.append(f"{name} imports {target}")
            others = target.startswith("orchestrator.modes.") and not (
                target.endswith(".mode") or target == "orchestrator.modes.base")
            if others and not target.startswith(name.rpartition(".")[0]):
                bad.append(f"{name} imports another mode's code: {target}")
    assert not bad, "\n".join(bad)


def _python36() -> str | None:
    from orchestrator.errors import UserError
    from orchestrator.site import envs

    try:
        return envs.find_python("3.6")
    except UserError:
        return None


def test_cntk_rank_code_compiles_under_python36(tmp_path):
    python = _python36()
    if python is None:
        if IN_CI:
            pytest.fail("CI: Python 3.6 (CNTK's) is not installed")
        pytest.skip("no Python 3.6 here")
    files = [str(PKG / f) for f in PY36]
    script = ("import py_compile, sys\n"
              "for f in sys.argv[2:]:\n"
              "    py_compile.compile(f, cfile=sys.argv[1], doraise=True)\n")
    proc = subprocess.run([python, "-c", script, str(tmp_path / "out.pyc"), *files],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # ... and imports there: the registry and the CNTK descriptor (no framework needed).
    proc = subprocess.run([python, "-c", "from orchestrator.modes.cntk.mode import MODE; "
                           "from orchestrator import protocol; print(MODE.name)"],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and proc.stdout.strip() == "cntk", proc.stderr


def _code_files(exclude: str) -> list[Path]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        if not rel.startswith(exclude):
            out.append(p)
    return out


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                docstrings.add(doc)
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)} - docstrings


def test_no_mode_is_named_outside_its_folder():
    """Only the default of ``--mode`` may name a mode outside orchestrator/modes/."""
    names = set(modes.registry())
    allowed = {"spec/settings.py": {"torch-ddp"}, "cli": {"torch-ddp"}}
    found = []
    for path in _code_files("modes/"):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("rankside/"):  # rank side names its library (cntk), not modes
            continue
        named = _string_literals(path) & names
        ok = allowed.get(rel) or allowed.get(rel.split("/")[0]) or set()
        if named - ok:
            found.append(f"{rel}: {sorted(named - ok)}")
    assert not found, "mode names outside their folders:\n" + "\n".join(found)


COMPARISON = re.compile(
    r"(scheduler|launcher)\s*(==|!=)|(==|!=)\s*[\"'](slurm|local|srun|mpirun)[\"']")


def test_no_scheduler_or_launcher_name_is_compared_outside_backends():
    found = []
    for path in _code_files("backends/"):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if COMPARISON.search(code) and "rec.scheduler == scheduler" not in code:
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    for path in sorted([*(ROOT / "templates").rglob("*.j2"), *PKG.rglob("*.j2")]):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(scheduler|launcher)\b[^%}]*(==|!=)", line):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "scheduler/launcher names compared outside backends:\n" + "\n".join(found)


RUNTIME_CLASSES = ("containers/base.py", "containers/apptainer.py", "containers/charliecloud.py")


def test_no_container_runtime_name_is_compared_outside_its_class():
    """A container runtime is one registered class: outside the runtime classes no module (nor
    a template) compares a runtime's name or keys a table by it."""
    names = "|".join(map(re.escape, containers.runtime_names()))
    comparison = re.compile(rf"runtime\w*\s*(==|!=)|(==|!=)\s*[\"']({names})[\"']"
                            rf"|[\"']({names})[\"']\s*:(?!\S)")
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path.relative_to(PKG).as_posix() in RUNTIME_CLASSES:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if comparison.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    for path in sorted([*(ROOT / "templates").rglob("*.j2"), *PKG.rglob("*.j2")]):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"runtime\b[^%}]*(==|!=)", line):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "container runtime names compared outside their classes:\n" + "\n".join(
        found)


def test_every_mode_folder_is_complete_and_declares_what_others_ask():
    for mode in modes.registry().values():
        folder = PKG / "modes" / mode.package
        for f in modes.REQUIRED_FILES:
            assert (folder / f).is_file(), f"{folder}: {f} missing"
        assert mode.pattern in modes.PATTERNS
        for backend in ("nccl", "gloo"):  # the overlap a run gets is one of the policies
            assert mode.overlap_for({"backend": backend}) in modes.OVERLAPS
        assert mode.library and mode.framework and mode.launchers


def test_registry_names_what_an_incomplete_mode_folder_lacks(tmp_path, monkeypatch):
    """A mode folder without its rank.py is an error naming the missing file."""
    import shutil

    copy = tmp_path / "orchestrator"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "modes" / "horovod" / "rank.py").unlink()
    proc = subprocess.run([sys.executable, "-c", "from orchestrator import modes; "
                           "modes.registry()"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode != 0
    assert "orchestrator/modes/horovod/ lacks rank.py" in proc.stderr


def _mode_packages() -> set[str]:
    return {mode.package for mode in modes.registry().values()}


def mode_path_references(path: Path, packages: set[str], name: str | None = None) -> list[str]:
    """Where a file imports a mode's own modules by their path (``from orchestrator.modes.x
    import mode``, ``..modes.x.rank``) or names that path in a string; the registry
    (``orchestrator.modes.get``, a descriptor's ``module``) is the way in. ``name``: the
    module's dotted name (default: from its path in the package)."""
    named = re.compile(r"\bmodes[./](" + "|".join(sorted(packages)) + r")\b")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    if path.suffix != ".py":
        return [f"{shown}:{n}: {line.strip()}"
                for n, line in enumerate(path.read_text().splitlines(), 1) if named.search(line)]
    found = []
    for target in sorted(imports_of(name or module_name(path), path)):
        parts = target.split(".")
        if parts[:2] == ["orchestrator", "modes"] and len(parts) > 2 and parts[2] in packages:
            found.append(f"{shown}: imports {target}")
    found += [f"{shown}: names {text!r}" for text in sorted(_string_literals(path))
              if named.search(text)]
    return found


def test_no_mode_is_imported_by_its_module_path_outside_its_folder():
    """Outside orchestrator/modes/ (templates included) a mode is reached through the
    registry, never by importing or naming its own modules."""
    packages = _mode_packages()
    files = _code_files("modes/")
    files += [p for p in sorted([*(ROOT / "templates").rglob("*.j2"), *PKG.rglob("*.j2")])
              if not p.is_relative_to(PKG / "modes")]
    found = [line for path in files for line in mode_path_references(path, packages)]
    assert not found, "modes imported by module path outside orchestrator/modes/:\n" + (
        "\n".join(found))


def test_the_mode_path_check_sees_imports_strings_and_templates(tmp_path):
    """The check above finds each way of naming a mode's module (else it could pass blind)."""
    packages = _mode_packages()
    module = tmp_path / "probe.py"
    module.write_text("from orchestrator.modes.allreduce_bench import mode\n"
                      "from ..modes.torch_ddp.mode import MODE\n"
                      "RANK = 'orchestrator.modes.horovod.rank'\n"
                      "FINE = ('orchestrator.modes.base', 'orchestrator.modes')\n")
    found = mode_path_references(module, packages, name="orchestrator.cli.probe")
    assert [f.split(": ", 1)[1] for f in found] == [
        "imports orchestrator.modes.allreduce_bench",
        "imports orchestrator.modes.allreduce_bench.mode",
        "imports orchestrator.modes.torch_ddp.mode",
        "names 'orchestrator.modes.horovod.rank'"], found
    template = tmp_path / "launch.sh.j2"
    template.write_text("python -m orchestrator.modes.cntk.rank\npython -m {{ module }}\n")
    assert mode_path_references(template, packages) == [
        "launch.sh.j2:1: python -m orchestrator.modes.cntk.rank"]


def test_the_architecture_document_names_every_floor_and_module():
    """docs/architecture.md stays true: each floor of LAYERS and each module on it is there."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [floor for floor, _ in LAYERS if f"| {floor} |" not in doc]
    missing += [name for _, names in LAYERS for name in names
                if name != "orchestrator" and f"`{name.removeprefix('orchestrator.')}`" not in doc]
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def long_functions(limit: int = 80) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function of the package longer than ``limit`` lines,
    from its def line to its body's last line, rank side included; longest first."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append((lines, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def test_no_function_is_longer_than_80_lines():
    """A function longer than a screen is split where a named step takes data in and gives
    data out (scripts/layout-figures prints the lengths with the other figures)."""
    found = long_functions(80)
    assert not found, "functions over 80 lines:\n" + "\n".join(f"{n} {w}" for n, w in found)
