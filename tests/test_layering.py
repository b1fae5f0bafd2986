"""The project's layering, checked on the source (ast) and on what importing loads.

- ``kernel_model`` is the kernel: it never loads Unicorn or the machine, not even
  transitively (it is unit-testable against a fake machine).
- Only the machine side talks to Unicorn: ``emu.machine``, ``emu.engine.memory``, the register
  file (``emu.engine.regfile``) and the bench's bare-Unicorn baselines (``emu.engine.baseline``).  Every other module - the front ends too,
  wherever they live (``emu/frontends/`` included) - uses the Machine API.
- No module imports another module's private (underscore) name.
- No import cycle among project modules (module-level imports; imports under
  ``if TYPE_CHECKING:`` do not run).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("emu", "kernel_model", "guest_programs")
UNICORN_ALLOWED = {"emu.machine", "emu.engine.memory", "emu.engine.regfile", "emu.engine.baseline"}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(mod: str, *, module_level: bool):
    """(target module, imported name or None, line) for each import of ``mod``.
    ``module_level``: only those that run when the module is imported."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text(), str(path))
    if module_level:
        nodes, todo = [], list(tree.body)
        while todo:
            node = todo.pop(0)
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                todo[:0] = [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                nodes.append(node)
    else:
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    is_pkg = path.name == "__init__.py"
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None, node.lineno
            continue
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module
        for a in node.names:
            if f"{target}.{a.name}" in MODULES:
                yield f"{target}.{a.name}", None, node.lineno
            else:
                yield target, a.name, node.lineno


def _top(name: str) -> str:
    return name.split(".")[0]


def test_the_scan_sees_the_project():
    assert {"emu.machine", "emu.engine.memory", "kernel_model.kernel.events.uprobes", "kernel_model.arch.x86.lib.insn"} <= set(MODULES)


@pytest.mark.parametrize("mod", [m for m in MODULES if _top(m) == "kernel_model"])
def test_kernel_model_does_not_import_unicorn_or_the_machine(mod):
    bad = [(t, line) for t, _, line in _imports(mod, module_level=False)
           if _top(t) == "unicorn" or t in ("emu.machine", "emu.engine.memory", "emu.engine.regfile") or
           t.startswith("emu.frontends")]
    assert not bad, f"{mod} imports {bad}"


def test_importing_the_kernel_model_loads_neither_unicorn_nor_the_machine():
    mods = [m for m in MODULES if _top(m) == "kernel_model"]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in mods) +
            "print(sorted(m for m in sys.modules if m == 'unicorn' or m.startswith('unicorn.') "
            "or m in ('emu.machine', 'emu.engine.memory')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing kernel_model loaded {out.stdout.strip()}"


@pytest.mark.parametrize("mod", [m for m in MODULES if m not in UNICORN_ALLOWED])
def test_only_the_machine_side_imports_unicorn(mod):
    bad = [line for t, _, line in _imports(mod, module_level=False) if _top(t) == "unicorn"]
    assert not bad, f"{mod} imports unicorn (lines {bad}); use the Machine API"


@pytest.mark.parametrize("mod", list(MODULES))
def test_no_module_imports_a_private_name_of_another(mod):
    bad = [(t, name, line) for t, name, line in _imports(mod, module_level=False)
           if t != "__future__" and (
               (name is not None and name.startswith("_") and not name.startswith("__")) or
               any(p.startswith("_") and not p.startswith("__") for p in t.split(".")))]
    assert not bad, f"{mod} imports private names {bad}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            if len(comp) > 1 or v in edges[v]:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _edges() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m, module_level=True) if t in MODULES and t != m}
            for m in MODULES}


def test_no_import_cycles():
    cycles = _cycles(_edges())
    assert cycles == [], f"import cycles: {cycles}"


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


SHIMS = {"emu.stepper", "emu.trace", "emu.testing", "emu.console"}


@pytest.mark.parametrize("mod", [m for m in MODULES if _top(m) == "emu" and
                                 not m.startswith("emu.frontends") and m not in SHIMS])
def test_the_engine_does_not_import_the_front_ends(mod):
    """emu/ is the engine; only the thin re-export modules kept for old import paths
    (and the console script) name emu.frontends."""
    bad = [(t, line) for t, _, line in _imports(mod, module_level=False) if t.startswith("emu.frontends")]
    assert not bad, f"{mod} imports front ends {bad}"


def _machine_private_names() -> set[str]:
    """Private methods and attributes of class Machine (emu/machine.py)."""
    tree = ast.parse(MODULES["emu.machine"].read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Machine")
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")
             and not n.name.startswith("__")}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == "self" and node.attr.startswith("_") and not node.attr.startswith("__"):
            names.add(node.attr)
    return names


def test_the_machine_has_private_state_to_protect():
    assert {"_result", "_hook_error", "_stop_requested", "_emulate"} <= _machine_private_names()


@pytest.mark.parametrize("mod", [m for m in MODULES if m not in ("emu.machine",)])
def test_no_module_outside_the_machine_uses_its_private_members(mod):
    private = _machine_private_names()
    path = MODULES[mod]
    bad = [(n.attr, n.lineno) for n in ast.walk(ast.parse(path.read_text(), str(path)))
           if isinstance(n, ast.Attribute) and n.attr in private and
           not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]
    assert not bad, f"{mod} uses private members of Machine: {bad}"


@pytest.mark.parametrize("mod", [m for m in MODULES if m.startswith("emu.frontends") or
                                 _top(m) == "kernel_model"])
def test_front_ends_and_the_kernel_model_never_touch_the_cpu_object(mod):
    """``machine.uc`` / ``regfile`` are the machine's own: others go through its API."""
    path = MODULES[mod]
    bad = [(n.attr, n.lineno) for n in ast.walk(ast.parse(path.read_text(), str(path)))
           if isinstance(n, ast.Attribute) and n.attr in ("uc", "regfile")]
    assert not bad, f"{mod} uses the machine's Unicorn objects: {bad}"
