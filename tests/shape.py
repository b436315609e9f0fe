"""The package's shape, read from its source with `ast` (nothing is imported): which package each module
belongs to, what it imports at module level and inside functions, and the rules docs/architecture.md
states. `tests/test_architecture.py` holds the real package to them and shows each rule fails on a planted
violation."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

# bottom to top: a module may import from its own package and from packages below it, never above
LAYERS = ("core", "specs", "engines", "memory", "perf", "search", "launch", "audit", "verify", "cli")
ENTRY_MODULES = ("__init__", "__main__")
# optional heavy dependencies a function may import where it needs them (verify needs torch; --plot matplotlib)
HEAVY = ("torch", "numpy", "matplotlib", "triton", "flash_mla")
# a dependency one module may import at its first use, and why: pydantic validates a user's file (the built-in
# data is built without it), jinja2 renders launch scripts, PyYAML parses a user's file or a built-in one whose
# parse is not kept yet (core/resources.read_data) and writes YAML; `plan` on built-ins without --emit needs none
# of them (together 0.12 s of a 2-core machine's start-up: benchmarks/startup.py)
DEFERRED = {"core.validation": ("pydantic",), "launch.render": ("jinja2",), "core.files": ("yaml",)}
LAZY_LOADER = "cli.app"    # the one module that imports by name at run time: the CLI loading its own commands
MAX_LINES = 300


@dataclass
class Module:
    name: str                                     # dotted, e.g. mla_planner.perf.step
    path: Path
    lines: int
    top: set[str] = field(default_factory=set)    # modules imported at module level (incl. under if/try)
    inner: set[str] = field(default_factory=set)  # modules imported inside a function or class body
    by_name: int = 0                              # calls of importlib.import_module / __import__


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, is_pkg: bool, node, known: set[str]) -> set[str]:
    """The modules an import statement loads: `from pkg import mod` names mod when it is a module."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = _resolve(module, is_pkg, node)
    out = set()
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.add(sub if sub in known else base)
    return out


def read_package(root: Path, package: str) -> dict[str, Module]:
    """Every module under ROOT/PACKAGE with its module-level and function-level imports."""
    files = sorted((root / package).rglob("*.py"))
    names = {}
    for p in files:
        parts = list(p.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        names[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    known = set(names)
    modules = {}
    for name, (p, is_pkg) in names.items():
        text = p.read_text()
        m = Module(name, p, len(text.splitlines()))
        _walk(ast.parse(text), name, is_pkg, known, m, inside=False)
        modules[name] = m
    return modules


def _walk(node, name: str, is_pkg: bool, known: set[str], m: Module, inside: bool) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Call) and _called(child.func) in ("import_module", "__import__"):
            m.by_name += 1
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            (m.inner if inside else m.top).update(_targets(name, is_pkg, child, known))
        deeper = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        _walk(child, name, is_pkg, known, m, deeper)


def _called(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def layer_of(package: str, module: str) -> int | None:
    """Rank of the module's package in LAYERS; None for the entry modules at the top of the package."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in ENTRY_MODULES:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else -1


def heavy_modules(modules: dict[str, Module]) -> set[str]:
    """Package modules that import a heavy dependency at module level, directly or through each other."""
    heavy = {n for n, m in modules.items() if any(t.split(".")[0] in HEAVY for t in m.top)}
    grew = True
    while grew:
        more = {n for n, m in modules.items() if n not in heavy and m.top & heavy}
        heavy |= more
        grew = bool(more)
    return heavy


def violations(root: Path, package: str) -> list[str]:
    """Every breach of the rules, one line each (empty: the package keeps its shape)."""
    modules = read_package(root, package)
    out = []
    out += _stray_top_level(root, package)
    out += _upward(package, modules)
    out += _cycles(modules)
    out += _inner_imports(package, modules)
    out += [f"{name} imports by name at run time (only {package}.{LAZY_LOADER} may: it loads the commands)"
            for name, m in modules.items() if m.by_name and name != f"{package}.{LAZY_LOADER}"]
    out += [f"{m.path.relative_to(root)}: {m.lines} lines (at most {MAX_LINES})"
            for m in modules.values() if m.lines > MAX_LINES]
    return out


def _stray_top_level(root: Path, package: str) -> list[str]:
    out = []
    for p in sorted((root / package).iterdir()):
        if p.suffix == ".py" and p.stem not in ENTRY_MODULES:
            out.append(f"{package}/{p.name}: a module at the top level (only packages and {ENTRY_MODULES})")
        if p.is_dir() and (p / "__init__.py").exists() and p.name not in LAYERS:
            out.append(f"{package}/{p.name}: a package not in the layer list {LAYERS}")
    return out


def _upward(package: str, modules: dict[str, Module]) -> list[str]:
    out = []
    for name, m in modules.items():
        mine = layer_of(package, name)
        for t in sorted(m.top):
            if not t.startswith(package + "."):
                continue
            theirs = layer_of(package, t)
            if mine is not None and theirs is not None and theirs > mine:
                out.append(f"{name} imports {t}: upward ({LAYERS[mine]} -> {LAYERS[theirs]})")
    return out


def _cycles(modules: dict[str, Module]) -> list[str]:
    """Import cycles among the package's modules (module-level imports), each as its path."""
    graph = {n: sorted(t for t in m.top if t in modules and t != n) for n, m in modules.items()}
    state, stack, out = {}, [], []

    def visit(n: str) -> None:
        state[n] = "open"
        stack.append(n)
        for t in graph[n]:
            if state.get(t) == "open":
                out.append("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return out


def _inner_imports(package: str, modules: dict[str, Module]) -> list[str]:
    heavy = heavy_modules(modules)
    out = []
    for name, m in modules.items():
        for t in sorted(m.inner):
            if t.split(".")[0] in HEAVY or t in heavy:
                continue
            if t.split(".")[0] in DEFERRED.get(name.split(".", 1)[-1], ()):
                continue
            out.append(f"{name} imports {t} inside a function (only {', '.join(HEAVY)} and modules that load "
                       "them may be)")
    return out
