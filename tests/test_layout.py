"""The package's shape (docs/architecture.md): folders that import only the folders below them in the
pipeline, no import cycle, one PAGE_SIZE, no module reading another's underscore names, an import
inside a function only with its reason beside it, each package face's __all__ real, and the reference
child standalone. Read from the source with ast, as the imports are written (module and function level)."""
import ast
import importlib
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "kmemsim"
# the floors, lowest first: a folder imports only from its own and the floors below it
FLOORS = ["core", "engine", "workload", "live", "report", "experiment", "sweep", "validate", "cli", "bench"]
# libraries whose import inside a function is expected without a word (the standard library's are not)
STDLIB = set(sys.stdlib_module_names)


def modules():
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        out[name] = p
    return out


MODS = modules()


def _base(cur, node):
    if node.level:
        parts = cur.split(".") if MODS[cur].name == "__init__.py" else cur.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))
    return node.module or ""


def imports(name):
    """(imported kmemsim module, the ImportFrom/Import node, whether inside a function) of module name."""
    tree = ast.parse(MODS[name].read_text())
    inside = set()
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside |= {id(n) for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            b = _base(name, n)
            for a in n.names:
                full = f"{b}.{a.name}"
                yield (full if full in MODS else b), n, id(n) in inside
        elif isinstance(n, ast.Import):
            for a in n.names:
                yield a.name, n, id(n) in inside


def graph():
    return {m: {t for t, _, _ in imports(m) if t in MODS and t != m} for m in MODS}


def floor(name):
    parts = name.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS else -1


def test_no_import_cycle():
    # Tarjan's strongly connected components over every import, module-level and in functions
    g, index, low, stack, on, sccs = graph(), {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
                sccs.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert not sccs, sccs


def test_folders_import_only_the_floors_below():
    up = [(m, t) for m, ts in graph().items() for t in ts if floor(t) > floor(m)]
    assert not up, up


def test_page_size_defined_once():
    # the one PAGE_SIZE (core/units.py): no other module assigns 4096 to a page-ish name
    where = []
    for name, p in MODS.items():
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value == 4096:
                where += [f"{name}.{t.id}" for t in n.targets if isinstance(t, ast.Name) and "PAGE" in t.id.upper()
                          or isinstance(t, ast.Name) and t.id == "P"]
    assert where == ["kmemsim.core.units.PAGE_SIZE"]


def _own_names(tree):
    """Underscore names a module defines: functions, classes, module and class assignments, and
    attributes it assigns (self._x = ...)."""
    own = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                for x in ast.walk(t):
                    if isinstance(x, ast.Name):
                        own.add(x.id)
                    elif isinstance(x, ast.Attribute):
                        own.add(x.attr)
        elif isinstance(n, ast.arg):
            own.add(n.arg)
    return {x for x in own if x.startswith("_") and not x.endswith("_")}


def test_no_module_reads_anothers_private_names():
    trees = {m: ast.parse(p.read_text()) for m, p in MODS.items()}
    own = {m: _own_names(t) for m, t in trees.items()}
    everyone = set().union(*own.values())
    bad = []
    for m, tree in trees.items():
        for t, n, _ in imports(m):
            if isinstance(n, ast.ImportFrom):
                for a in n.names:
                    # kmemsim._core is the C extension cffi builds, not a module of ours
                    if a.name.startswith("_") and not a.name.startswith("__") and a.name != "_core" \
                            and t.startswith("kmemsim"):
                        bad.append(f"{m} imports {t}.{a.name}")
        for n in ast.walk(tree):
            # obj._name where _name is one of kmemsim's own and not this module's: another's private
            if isinstance(n, ast.Attribute) and n.attr in everyone - own[m] and not n.attr.startswith("__"):
                bad.append(f"{m}:{n.lineno} reads .{n.attr}")
    assert not bad, bad


def test_imports_inside_functions_say_why():
    # "no import inside a function unless it keeps start-up fast (say so in a comment)": a function's
    # import of kmemsim or of a third-party library has a comment on its line, in the block of imports it
    # belongs to, or on the line above that block
    bad = []
    for m, p in MODS.items():
        lines = p.read_text().splitlines()
        if m == "kmemsim.validate.child":          # a script of its own (test_child_is_standalone)
            continue
        for t, n, inside in imports(m):
            top = t.split(".")[0]
            if not inside or (top in STDLIB and top != "kmemsim"):
                continue
            # the block of imports this one ends, and the line above it
            first = n.lineno - 1
            while first > 0 and lines[first - 1].strip().startswith(("import ", "from ")):
                first -= 1
            if not any("#" in line for line in lines[max(0, first - 1):n.end_lineno]):
                bad.append(f"{m}:{n.lineno}: {lines[n.lineno - 1].strip()}")
    assert not bad, bad


@pytest.mark.parametrize("face", sorted(m for m, p in MODS.items() if p.name == "__init__.py"))
def test_package_faces_export_what_they_name(face):
    mod = importlib.import_module(face)
    assert mod.__doc__, f"{face}: a face says what its folder holds"
    if face in ("kmemsim", "kmemsim.cli"):
        return
    assert hasattr(mod, "__all__"), f"{face} has no __all__"
    for name in mod.__all__:
        assert hasattr(mod, name) or importlib.import_module(f"{face}.{name}"), f"{face}.{name}"


def test_child_is_standalone():
    # the reference child runs alone: llama_cpp, numpy and the standard library, never kmemsim, so
    # the engine's footprint the validation measures is llama-cpp-python's (validate/child.py)
    tops = {t.split(".")[0] for t, _, _ in imports("kmemsim.validate.child")}
    assert tops <= STDLIB | {"llama_cpp", "numpy"}, tops
    assert MODS["kmemsim.validate.child"].read_text().count('if __name__ == "__main__":') == 1
