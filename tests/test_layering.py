"""The project's layering, checked on the source (ast) and on what importing loads.

The rules (docs/architecture.md draws them):
- No import cycle among project modules, counting the imports inside functions too (an
  import under ``if TYPE_CHECKING:`` never runs and does not count).
- Unicorn is imported only in ``emu/engine/``.
- ``kernel_model`` imports nothing from ``emu`` but the engine interface
  (``emu.engine.interface``); importing it loads neither Unicorn nor the machine.
- The uprobes core (``kernel_model/kernel/events/``, ``kernel_model/arch/x86/kernel/
  uprobes*``) imports no filesystem, symbol or ELF code: it sees (file, offset) only.
- Front ends (``emu/frontends/``) import only the public emu layer - the ``emu``
  package, the machine facade, the read-only inspection API (``emu.inspect``), the
  debugger core, the replay, the probe tooling, the lazy re-exports - and the kernel model's read-only
  vocabulary (errors, events, profiles); they compare no internal state to a string.
- The checkpoint saves what each class declares: ``emu/replay/`` names no attribute as a
  string.
- No module imports another module's private (underscore) name; no module outside the
  machine uses the machine's private members or its Unicorn objects.
- No module over 900 lines; the machine facade under 600.

Every rule is a function over a :class:`Tree`, so the tests at the end can show each one
failing on a small tree that breaks it on purpose.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("emu", "kernel_model", "guest_programs")
MAX_MODULE_LINES = 900
MAX_FACADE_LINES = 600
ENGINE = "emu.engine"
ENGINE_INTERFACE = "emu.engine.interface"
UPROBES_CORE = ("kernel_model.kernel.events", "kernel_model.arch.x86.kernel.uprobes")
# what the uprobes core may not import: filesystem, symbol and ELF code, tracefs parsing
# (it publishes to the event stream, kernel_model.trace.events, and nothing more of trace/)
UPROBES_CORE_FORBIDDEN = ("kernel_model.fs", "kernel_model.trace", "emu", "elftools")
UPROBES_CORE_MAY_USE = ("kernel_model.trace.events",)
FRONTENDS = "emu.frontends"
# the public emu layer and the kernel model's read-only vocabulary
FRONTEND_ALLOWED = (
    "emu",
    "emu.machine",
    "emu.inspect",
    "emu.debug",
    "emu.replay",
    "emu.probes",
    "emu.asm",
    "emu.frontends",
    "emu.lazy_exports",
    "kernel_model.errors",
    "kernel_model.trace.events",
    "kernel_model.profiles",
    "guest_programs",
    "emu.engine.baseline",
)  # the bench's bare-engine loops, timed beside the model
FACADE = "emu.machine"
PUBLIC_FRONTEND_PATHS = ("emu.console", "emu.stepper", "emu.trace", "emu.testing")
REPLAY = "emu.replay"


def _within(name: str, prefixes) -> bool:
    """``name`` is one of ``prefixes`` or a module inside one of them."""
    if isinstance(prefixes, str):
        prefixes = (prefixes,)
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


@dataclass
class Import:
    target: str  # the module imported (a project module where the name is one)
    name: str | None  # the name imported from it, or None
    line: int
    module_level: bool  # runs when the importing module is imported


@dataclass
class Tree:
    """The project's modules below ``root``: name -> path, and each one's imports."""

    root: Path
    packages: tuple = PACKAGES
    modules: dict = field(default_factory=dict)

    def __post_init__(self):
        for pkg in self.packages:
            for path in sorted((self.root / pkg).rglob("*.py")):
                parts = list(path.relative_to(self.root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                self.modules[".".join(parts)] = path
        self._cache = {}

    def tree(self, mod: str) -> ast.Module:
        if mod not in self._cache:
            path = self.modules[mod]
            self._cache[mod] = ast.parse(path.read_text(), str(path))
        return self._cache[mod]

    def imports(self, mod: str) -> list[Import]:
        """Every import of ``mod`` that can run: module level and inside functions;
        not those under ``if TYPE_CHECKING:``."""
        out = []
        is_pkg = self.modules[mod].name == "__init__.py"

        def visit(node, module_level):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    for other in child.orelse:
                        visit_stmt(other, module_level)
                    continue
                visit_stmt(child, module_level)

        def visit_stmt(child, module_level):
            if isinstance(child, ast.Import):
                out.extend(Import(a.name, None, child.lineno, module_level) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module
                for a in child.names:
                    if f"{target}.{a.name}" in self.modules:
                        out.append(Import(f"{target}.{a.name}", None, child.lineno, module_level))
                    else:
                        out.append(Import(target, a.name, child.lineno, module_level))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            else:
                visit(child, module_level)

        visit(self.tree(mod), True)
        return out

    def edges(self) -> dict[str, set[str]]:
        return {
            m: {i.target for i in self.imports(m) if i.target in self.modules and i.target != m} for m in self.modules
        }


def _top(name: str) -> str:
    return name.split(".")[0]


# ---------------------------------------------------------------------------- the rules
def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def unicorn_outside_the_engine(tree: Tree, mod: str) -> list:
    if _within(mod, ENGINE):
        return []
    return [i.line for i in tree.imports(mod) if _top(i.target) == "unicorn"]


def kernel_model_reaching_into_emu(tree: Tree, mod: str) -> list:
    if _top(mod) != "kernel_model":
        return []
    return [
        (i.target, i.line)
        for i in tree.imports(mod)
        if _top(i.target) in ("emu", "unicorn") and i.target != ENGINE_INTERFACE
    ]


def uprobes_core_reaching_files_or_symbols(tree: Tree, mod: str) -> list:
    if not _within(mod, UPROBES_CORE):
        return []
    return [
        (i.target, i.line)
        for i in tree.imports(mod)
        if _within(i.target, UPROBES_CORE_FORBIDDEN) and not _within(i.target, UPROBES_CORE_MAY_USE)
    ]


def front_end_reaching_past_the_api(tree: Tree, mod: str) -> list:
    if not _within(mod, FRONTENDS):
        return []
    return [
        (i.target, i.line)
        for i in tree.imports(mod)
        if _top(i.target) in PACKAGES and not (i.target == "emu" or _within(i.target, FRONTEND_ALLOWED[1:]))
    ]


def string_compares_on_state(tree: Tree, mod: str) -> list:
    """``x.state == "..."`` (or ``!=``, ``in``) in a front end on anything but its own
    state (``self.state``): the model's internal states are asked through the
    inspection API."""
    if not _within(mod, FRONTENDS):
        return []
    bad = []
    for node in ast.walk(tree.tree(mod)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(
                isinstance(s, ast.Attribute)
                and s.attr == "state"
                and not (isinstance(s.value, ast.Name) and s.value.id == "self")
                for s in sides
            ) and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                bad.append(node.lineno)
    return bad


def checkpoint_naming_attributes(tree: Tree, mod: str) -> list:
    """The replay restores what each class declares (``checkpoint_keep``,
    ``checkpoint_by_reference``): no private attribute named as a string (``"_result"``,
    ``getattr(obj, "_name")``) in ``emu/replay/``."""
    if not _within(mod, REPLAY):
        return []
    bad = []
    for node in ast.walk(tree.tree(mod)):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.isidentifier()
            and node.value.startswith("_")
            and not node.value.startswith("__")
        ):
            bad.append((node.value, node.lineno))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
            and not str(node.args[1].value).startswith("__")
        ):
            bad.append((node.args[1].value, node.lineno))
    return bad


def engine_or_kernel_importing_front_ends(tree: Tree, mod: str) -> list:
    """Only the front ends themselves, the console script and the public import paths
    the documentation's examples use (``emu.stepper``, ``emu.trace``, ``emu.testing``) name
    ``emu.frontends``."""
    if _within(mod, FRONTENDS) or mod in PUBLIC_FRONTEND_PATHS:
        return []
    return [(i.target, i.line) for i in tree.imports(mod) if _within(i.target, FRONTENDS)]


def private_imports(tree: Tree, mod: str) -> list:
    return [
        (i.target, i.name, i.line)
        for i in tree.imports(mod)
        if i.target != "__future__"
        and (
            (i.name is not None and i.name.startswith("_") and not i.name.startswith("__"))
            or any(p.startswith("_") and not p.startswith("__") for p in i.target.split("."))
        )
    ]


def too_long(tree: Tree, mod: str) -> int | None:
    limit = MAX_FACADE_LINES if mod == FACADE else MAX_MODULE_LINES
    n = len(tree.modules[mod].read_text().splitlines())
    return n if n > limit else None


RULES = (
    unicorn_outside_the_engine,
    kernel_model_reaching_into_emu,
    uprobes_core_reaching_files_or_symbols,
    front_end_reaching_past_the_api,
    string_compares_on_state,
    checkpoint_naming_attributes,
    engine_or_kernel_importing_front_ends,
    private_imports,
)

PROJECT = Tree(ROOT)
MODULES = PROJECT.modules


# ------------------------------------------------------------------ the project obeys them
def test_the_scan_sees_the_project():
    assert {
        "emu.machine",
        ENGINE_INTERFACE,
        "kernel_model.kernel.events.uprobes",
        "kernel_model.arch.x86.kernel.uprobes",
        "emu.frontends.cli",
    } <= set(MODULES)


def test_no_import_cycles_even_inside_functions():
    found = cycles(PROJECT.edges())
    assert found == [], f"import cycles: {found}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_every_module_obeys(rule):
    bad = {m: v for m in MODULES if (v := rule(PROJECT, m))}
    assert bad == {}, f"{rule.__name__}: {bad}"


def test_no_module_is_too_long():
    bad = {m: n for m in MODULES if (n := too_long(PROJECT, m))}
    assert bad == {}, f"modules over {MAX_MODULE_LINES} lines (the facade: {MAX_FACADE_LINES}): {bad}"


def test_importing_the_kernel_model_loads_neither_unicorn_nor_the_engine():
    mods = [m for m in MODULES if _top(m) == "kernel_model"]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in mods)
        + "print(sorted(m for m in sys.modules if m == 'unicorn' or m.startswith('unicorn.') "
        "or m == 'emu.machine' or (m.startswith('emu.engine.') and m != 'emu.engine.interface')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing kernel_model loaded {out.stdout.strip()}"


def _machine_private_names() -> set[str]:
    """Private methods and attributes of class Machine (emu/machine.py)."""
    tree = PROJECT.tree(FACADE)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Machine")
    names = {
        n.name
        for n in cls.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("_") and not n.name.startswith("__")
    }
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            names.add(node.attr)
    return names


def test_the_machine_has_private_state_to_protect():
    assert {"_uprobes", "_end"} <= _machine_private_names()


def _kernel_parts() -> tuple[set[str], set[str]]:
    """The modules :class:`Kernel` is put together from, and the private members its
    parts use on ``self`` (the run's end, the stop request, the pid counter...)."""
    from kernel_model.kernel.kernel import Kernel

    parts = [c for c in Kernel.__mro__ if c.__module__ in MODULES and c.__module__ != ENGINE_INTERFACE]
    mods = {c.__module__ for c in parts}
    names = set()
    for cls in parts:
        node = next(
            n for n in ast.walk(PROJECT.tree(cls.__module__)) if isinstance(n, ast.ClassDef) and n.name == cls.__name__
        )
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "self"
                and sub.attr.startswith("_")
                and not sub.attr.startswith("__")
            ):
                names.add(sub.attr)
            if isinstance(sub, ast.FunctionDef) and sub.name.startswith("_") and not sub.name.startswith("__"):
                names.add(sub.name)
    return mods, names


def test_the_kernel_has_private_state_to_protect():
    assert {"_result", "_stop_requested", "_next_pid"} <= _kernel_parts()[1]


def test_no_module_outside_the_kernels_parts_uses_their_private_members():
    mods, private = _kernel_parts()
    bad = {
        m: found
        for m in MODULES
        if m not in mods
        and (
            found := [
                (n.attr, n.lineno)
                for n in ast.walk(PROJECT.tree(m))
                if isinstance(n, ast.Attribute)
                and n.attr in private
                and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))
            ]
        )
    }
    assert bad == {}, f"private members of Kernel used outside its parts: {bad}"


@pytest.mark.parametrize("mod", [m for m in MODULES if m != FACADE])
def test_no_module_outside_the_machine_uses_its_private_members(mod):
    private = _machine_private_names()
    bad = [
        (n.attr, n.lineno)
        for n in ast.walk(PROJECT.tree(mod))
        if isinstance(n, ast.Attribute)
        and n.attr in private
        and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))
    ]
    assert not bad, f"{mod} uses private members of Machine: {bad}"


@pytest.mark.parametrize("mod", [m for m in MODULES if _within(m, FRONTENDS) or _top(m) == "kernel_model"])
def test_front_ends_and_the_kernel_model_never_touch_the_cpu_object(mod):
    """``machine.uc`` / ``regfile`` are the engine's own: others go through its API."""
    bad = [
        (n.attr, n.lineno)
        for n in ast.walk(PROJECT.tree(mod))
        if isinstance(n, ast.Attribute) and n.attr in ("uc", "regfile")
    ]
    assert not bad, f"{mod} uses the machine's Unicorn objects: {bad}"


# ------------------------------------------------------- and each rule catches a violation
def _write_tree(tmp_path: Path, files: dict[str, str]) -> Tree:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return Tree(tmp_path)


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    tree = _write_tree(
        tmp_path,
        {
            "emu/machine.py": "from emu.replay import checkpoint\n",
            "emu/replay/__init__.py": "",
            "emu/replay/checkpoint.py": "def restore():\n    from emu.machine import Machine\n",
        },
    )
    assert cycles(tree.edges()) == [["emu.machine", "emu.replay.checkpoint"]]


def test_an_import_under_type_checking_makes_no_cycle(tmp_path):
    tree = _write_tree(
        tmp_path,
        {
            "emu/a.py": "from emu import b\n",
            "emu/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from emu import a\n",
        },
    )
    assert cycles(tree.edges()) == []


VIOLATIONS = [
    (unicorn_outside_the_engine, "kernel_model/kernel/signal.py", "def f():\n    from unicorn import Uc\n", [2]),
    (
        kernel_model_reaching_into_emu,
        "kernel_model/mm/mmap.py",
        "def f():\n    import emu.engine.memory\n",
        [("emu.engine.memory", 2)],
    ),
    (
        uprobes_core_reaching_files_or_symbols,
        "kernel_model/kernel/events/uprobes.py",
        "from kernel_model.fs.namei import Vfs\n",
        [("kernel_model.fs.namei", 1)],
    ),
    (
        front_end_reaching_past_the_api,
        "emu/frontends/cli.py",
        "from kernel_model.kernel.events.uprobes import Uprobes\n",
        [("kernel_model.kernel.events.uprobes", 1)],
    ),
    (string_compares_on_state, "emu/frontends/stepper.py", "def f(utask):\n    return utask.state == 'sstep'\n", [2]),
    (
        uprobes_core_reaching_files_or_symbols,
        "kernel_model/kernel/events/uretprobes.py",
        "def f():\n    from kernel_model.trace.trace_uprobe import TraceEvents\n",
        [("kernel_model.trace.trace_uprobe", 2)],
    ),
    (
        checkpoint_naming_attributes,
        "emu/replay/checkpoint.py",
        "def save(m):\n    return getattr(m, '_result')\n",
        [("_result", 2), ("_result", 2)],
    ),
    (
        engine_or_kernel_importing_front_ends,
        "emu/machine.py",
        "def f():\n    from emu.frontends.cli import main\n",
        [("emu.frontends.cli", 2)],
    ),
    (private_imports, "emu/frontends/cli.py", "from emu.machine import _helper\n", [("emu.machine", "_helper", 1)]),
]


@pytest.mark.parametrize("rule,path,text,expected", VIOLATIONS, ids=[v[0].__name__ for v in VIOLATIONS])
def test_the_rule_fails_on_a_deliberate_violation(tmp_path, rule, path, text, expected):
    extra = {
        "kernel_model/kernel/events/__init__.py": "",
        "kernel_model/kernel/__init__.py": "",
        "kernel_model/fs/__init__.py": "",
        "kernel_model/fs/namei.py": "",
        "kernel_model/mm/__init__.py": "",
        "emu/engine/__init__.py": "",
        "emu/engine/memory.py": "",
        "emu/replay/__init__.py": "",
        "emu/frontends/__init__.py": "",
        "emu/machine.py": "",
        "kernel_model/kernel/signal.py": "",
    }
    tree = _write_tree(tmp_path, {**extra, path: text})
    mod = ".".join(Path(path).with_suffix("").parts)
    assert rule(tree, mod) == expected, f"{rule.__name__} on {path}: expected {expected}, got {rule(tree, mod)}"


@pytest.mark.parametrize("rule,path,text,expected", VIOLATIONS, ids=[v[0].__name__ for v in VIOLATIONS])
def test_the_rule_passes_the_allowed_form(tmp_path, rule, path, text, expected):
    """The same module without the violation passes: the rule is not simply always red."""
    tree = _write_tree(
        tmp_path,
        {
            path: "from emu.engine import interface\nimport os\n",
            "emu/engine/__init__.py": "",
            "emu/engine/interface.py": "",
            "kernel_model/kernel/events/__init__.py": "",
            "emu/replay/__init__.py": "",
            "emu/frontends/__init__.py": "",
        },
    )
    mod = ".".join(Path(path).with_suffix("").parts)
    if rule in (uprobes_core_reaching_files_or_symbols,):
        tree.modules[mod].write_text("import struct\nfrom kernel_model.trace.events import Exec\n")
        tree._cache.clear()
    if rule is string_compares_on_state:
        tree.modules[mod].write_text("class Parser:\n    def f(self):\n        return self.state == 'idle'\n")
        tree._cache.clear()
    if rule is front_end_reaching_past_the_api:
        tree.modules[mod].write_text("from emu.machine import Machine\nfrom kernel_model.errors import InputError\n")
        tree._cache.clear()
    assert rule(tree, mod) == [], f"{rule.__name__} flags the allowed form of {path}"


def test_a_long_module_is_flagged(tmp_path):
    tree = _write_tree(
        tmp_path,
        {
            "emu/big.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
            "emu/machine.py": "x = 1\n" * (MAX_FACADE_LINES + 1),
            "emu/small.py": "x = 1\n" * MAX_FACADE_LINES,
        },
    )
    assert (too_long(tree, "emu.big"), too_long(tree, "emu.machine"), too_long(tree, "emu.small")) == (
        MAX_MODULE_LINES + 1,
        MAX_FACADE_LINES + 1,
        None,
    )


def test_the_kernels_parts_define_disjoint_names():
    """:class:`Kernel` is put together from parts that live where Linux has them
    (traps.c, entry/common.c, signal.c, sched, fork.c, exec.c, exit.c): a name two
    parts define would make one silently shadow the other by base order."""
    from kernel_model.kernel.kernel import Kernel

    owners: dict[str, list[str]] = {}
    interfaces = [b for b in Kernel.__bases__ if b.__module__ == ENGINE_INTERFACE]
    assert interfaces and not Kernel.__abstractmethods__, "Kernel implements the engine's trap handler"
    for part in (Kernel, *(b for b in Kernel.__bases__ if b not in interfaces)):
        for name in vars(part):
            if not (name.startswith("__") and name.endswith("__")) and name != "_abc_impl":
                owners.setdefault(name, []).append(part.__name__)
    shared = {name: parts for name, parts in owners.items() if len(parts) > 1}
    assert shared == {}, f"names defined by more than one part of Kernel: {shared}"
