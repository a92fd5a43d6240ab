"""The map is a test: docs/ARCHITECTURE.md's import rules (its ```imports block) are read and every import in
vcollect/ is held to them, so the map and the code cannot drift apart.

Checked, over every import: those that run (at module level or inside a function) and those made for type
hints only (in ``if TYPE_CHECKING:`` blocks: they never run, but a reader follows them like any other arrow):
- every module lies in a room the map names;
- a room imports only rooms on its own layer or below (layers are listed top to bottom);
- the map's ``never`` and ``only`` lines hold;
- no import cycle between modules, lazy (in-function) and type-only imports included;
- no private name (``_x``) is imported from another module.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "vcollect"
MAP = REPO / "docs" / "ARCHITECTURE.md"


@dataclass
class Rules:
    layers: list[list[str]] = field(default_factory=list)
    never: list[tuple[str, str]] = field(default_factory=list)
    only: list[tuple[list[str], str]] = field(default_factory=list)

    def rooms(self) -> list[str]:
        return [room for layer in self.layers for room in layer]

    def layer_of(self, room: str) -> int:
        return next(i for i, layer in enumerate(self.layers) if room in layer)


def read_rules(text: str) -> Rules:
    """The ```imports block of the map: one layer a line (top first), ``never A -> B C``, ``only A B -> C``."""
    match = re.search(r"```imports\n(.*?)```", text, re.S)
    assert match, "docs/ARCHITECTURE.md has no ```imports block of import rules"
    rules = Rules()
    for raw in match.group(1).splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("never ", "only ")):
            kind, rest = line.split(" ", 1)
            left, right = (part.split() for part in rest.split("->"))
            if kind == "never":
                rules.never.extend((a, b) for a in left for b in right)
            else:
                rules.only.extend((left, b) for b in right)
        else:
            rules.layers.append(line.split())
    return rules


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def room_of(module: str, rooms: list[str]) -> str | None:
    """The longest room name that ``module`` (vcollect.x.y) lies in; "vcollect" is the package's own __init__."""
    if module == "vcollect":
        return "vcollect" if "vcollect" in rooms else None
    inner = module.removeprefix("vcollect.")
    best = None
    for room in rooms:
        if (inner == room or inner.startswith(room + ".")) and (best is None or len(room) > len(best)):
            best = room
    return best


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    names: tuple[str, ...]
    line: int


def imports_of(path: Path, modules: set[str]) -> list[Import]:
    """Every vcollect import in ``path``, type-only ones included: ``from M import a`` goes to ``M.a`` when that
    is a module, else to ``M``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    source = module_name(path)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(source, a.name, (), node.lineno) for a in node.names if a.name.startswith("vcollect"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module
            if node.level:  # relative: from the file's package, up level - 1 more
                package = source.split(".") if path.name == "__init__.py" else source.split(".")[:-1]
                module = ".".join([*package[: len(package) - node.level + 1], module])
            if not module.startswith("vcollect"):
                continue
            plain = [a.name for a in node.names if f"{module}.{a.name}" not in modules]
            found.extend(Import(source, f"{module}.{a.name}", (a.name,), node.lineno)
                         for a in node.names if f"{module}.{a.name}" in modules)
            if plain:
                found.append(Import(source, module, tuple(plain), node.lineno))
    return found


def all_imports() -> tuple[set[str], list[Import]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in files}
    edges = [imp for p in files for imp in imports_of(p, modules)]
    return modules, edges


RULES = read_rules(MAP.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def graph() -> tuple[set[str], list[Import]]:
    """vcollect's modules and every import between them, parsed where a test of this file runs (not where the
    file is only collected)."""
    return all_imports()


def test_every_module_lies_in_a_room_of_the_map(graph: tuple[set[str], list[Import]]) -> None:
    modules, _ = graph
    rooms = RULES.rooms()
    assert len(rooms) == len(set(rooms)), "a room is listed on two layers"
    unmapped = sorted(m for m in modules if room_of(m, rooms) is None)
    assert not unmapped, f"modules the map does not place (add their room to the ```imports block): {unmapped}"
    empty = sorted(r for r in rooms if not any(room_of(m, rooms) == r for m in modules))
    assert not empty, f"rooms the map names that hold no module: {empty}"


def test_imports_point_down_the_layers(graph: tuple[set[str], list[Import]]) -> None:
    _, imports = graph
    rooms = RULES.rooms()
    upward = []
    for imp in imports:
        a, b = room_of(imp.source, rooms), room_of(imp.target, rooms)
        if a is None or b is None or a == b:
            continue
        if RULES.layer_of(b) < RULES.layer_of(a):
            upward.append(f"{imp.source}:{imp.line} ({a}) imports {imp.target} ({b}), a layer above")
    assert not upward, "\n".join(upward)


def test_the_maps_nevers_and_onlys_hold(graph: tuple[set[str], list[Import]]) -> None:
    _, imports = graph
    rooms = RULES.rooms()
    broken = []
    for imp in imports:
        a, b = room_of(imp.source, rooms), room_of(imp.target, rooms)
        if a is None or b is None or a == b:
            continue
        for left, right in RULES.never:
            if (a == left or a.startswith(left + ".")) and (b == right or b.startswith(right + ".")):
                broken.append(f"{imp.source}:{imp.line} imports {imp.target}: never {left} -> {right}")
        for allowed, target in RULES.only:
            if (b == target or b.startswith(target + ".")) and not any(
                    a == x or a.startswith(x + ".") for x in allowed) and not a.startswith(target + "."):
                broken.append(f"{imp.source}:{imp.line} imports {imp.target}: only {' '.join(allowed)} -> {target}")
    assert not broken, "\n".join(broken)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself): Tarjan's."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(edges):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycles_lazy_and_type_only_ones_included(graph: tuple[set[str], list[Import]]) -> None:
    modules, imports = graph
    edges: dict[str, set[str]] = {}
    for imp in imports:
        if imp.target in modules and imp.target != imp.source:
            edges.setdefault(imp.source, set()).add(imp.target)
    assert cycles(edges) == []


def test_no_private_name_crosses_a_module(graph: tuple[set[str], list[Import]]) -> None:
    _, imports = graph
    private = [f"{imp.source}:{imp.line} imports {name} from {imp.target}"
               for imp in imports for name in imp.names if name.startswith("_") and not name.startswith("__")]
    assert not private, "\n".join(private)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("```imports\nhigh\nlow\n```", True),
        ("no block here", False),
    ],
)
def test_the_rules_reader(text: str, ok: bool) -> None:
    if ok:
        assert read_rules(text).layers == [["high"], ["low"]]
    else:
        with pytest.raises(AssertionError):
            read_rules(text)


def test_the_checks_catch_what_they_are_for() -> None:
    """The checks themselves fail where they must: an upward import, a cycle, a private name."""
    rules = read_rules("```imports\ncli\nstore\nnever store -> cli\n```")
    assert rules.layer_of("store") > rules.layer_of("cli") and rules.never == [("store", "cli")]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert room_of("vcollect.store.read.reader", ["store", "store.read"]) == "store.read"
