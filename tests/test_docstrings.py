"""Docstrings in one style (Google's, as gymnasium writes them), and no history in the code's text.

Walked: every name in the ``__all__`` of the package and of its public subpackages (listed in ``MODULES``),
and the public methods, properties, ``__init__`` and ``__call__`` of every class among them, inherited ones
from vcollect's own bases included. Each must have its own docstring that opens with a summary line. Beyond
that, for each function or method:

- every parameter (``self``/``cls`` aside) is named in an ``Args:`` section (``*args``/``**kwargs`` as
  ``*args:``/``args:``), and the section names no parameter the signature lacks. A class documents its
  ``__init__`` parameters in the class docstring or in ``__init__``'s; a dataclass or NamedTuple documents
  its fields under ``Attributes:`` (or ``Args:``);
- a return annotation other than ``None``/``NoReturn`` asks for a ``Returns:`` (or ``Yields:``) section,
  unless the summary line already says what comes back: it starts with "Return", or, for a ``bool``, with
  "Whether";
- every exception class the body raises itself (``raise SomeError(...)``, nested functions aside) is named in a
  ``Raises:`` section. Exceptions raised by callees are the author's to list; this catches the direct ones.

Properties need only the summary. ``vcollect.cli`` and ``vcollect.collecting`` are not walked: the first is the
``vcollect`` command (documented by ``--help``), the second the collector's internals.

Separately, no comment or string in vcollect/ carries an issue number or the code's history.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import io
import re
import textwrap
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "vcollect"

MODULES = [
    "vcollect",
    "vcollect.buffers",
    "vcollect.distributed",
    "vcollect.envs",
    "vcollect.errors",
    "vcollect.hooks",
    "vcollect.minari",
    "vcollect.policies",
    "vcollect.stats",
    "vcollect.store",
]

SECTION = re.compile(
    r"^(Args|Arguments|Attributes|Returns|Yields|Raises|Example|Examples|Note|Notes|Warning|Warnings|See Also)"
    r":\s*$"
)
ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_]\w*)\s*(\([^)]*\))?\s*:")
RAISES_ENTRY = re.compile(r"^([A-Za-z_][\w.]*)(\s*,\s*[A-Za-z_][\w.]*)*\s*:")
NO_RETURN = {"None", "NoReturn", "Never", "typing.NoReturn", "typing.Never"}


def sections(doc: str) -> dict[str, list[str]]:
    """The Google-style sections of a cleaned docstring: header -> the lines indented under it."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in doc.splitlines():
        header = SECTION.match(line)
        if header:
            current = found.setdefault(header.group(1), [])
        elif line.strip() and not line.startswith((" ", "\t")):
            current = None
        elif current is not None:
            current.append(line)
    return found


def entries(lines: list[str], pattern: re.Pattern[str] = ENTRY) -> list[str]:
    """The entry lines of a section: those at its shallowest indentation, each ``name:`` or ``name (type):``."""
    texts = [line for line in lines if line.strip()]
    if not texts:
        return []
    indent = min(len(line) - len(line.lstrip()) for line in texts)
    names = []
    for line in texts:
        if len(line) - len(line.lstrip()) == indent:
            match = pattern.match(line.strip())
            if match:
                names.append(match.group(0).rstrip(":").strip())
    return names


def arg_names(doc: str, *headers: str) -> set[str]:
    found = sections(doc)
    names = set()
    for header in headers:
        for entry in entries(found.get(header, [])):
            names.add(ENTRY.match(entry + ":").group(1).lstrip("*"))  # type: ignore[union-attr]
    return names


def raises_names(doc: str) -> set[str]:
    names = set()
    for entry in entries(sections(doc).get("Raises", []), RAISES_ENTRY):
        names.update(part.strip().rsplit(".", 1)[-1] for part in entry.split(","))
    return names


def summary(doc: str) -> str:
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


def own_doc(obj: Any) -> str:
    doc = obj.__doc__ if isinstance(getattr(obj, "__doc__", None), str) else ""
    return inspect.cleandoc(doc) if doc else ""


def raised_in(func: Callable[..., Any]) -> set[str]:
    """Exception classes a function's own body raises by name (``raise X(...)`` / ``raise X``)."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return set()
    node = ast.parse(source).body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    names: set[str] = set()
    todo: list[ast.AST] = list(node.body)
    while todo:
        child = todo.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(child, ast.Raise) and child.exc is not None:
            exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
            name = exc.id if isinstance(exc, ast.Name) else getattr(exc, "attr", "")
            if name[:1].isupper():
                names.add(name)
        todo.extend(ast.iter_child_nodes(child))
    return names


def params(func: Callable[..., Any], *, bound: bool) -> list[str]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    names = list(signature.parameters)
    if bound and names and names[0] in ("self", "cls"):
        names = names[1:]
    return names


def return_annotation(func: Callable[..., Any]) -> str | None:
    """The return annotation as written, or None when there is none."""
    annotation = getattr(func, "__annotations__", {}).get("return", inspect.Signature.empty)
    if annotation is inspect.Signature.empty:
        return None
    if annotation is None:
        return "None"
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))


def function_problems(func: Callable[..., Any], *, bound: bool, extra_doc: str = "") -> list[str]:
    """What a function's docstring lacks; ``extra_doc`` (a class docstring, for ``__init__``) counts too."""
    func = inspect.unwrap(func)
    doc = own_doc(func)
    problems = []
    both = doc + "\n" + extra_doc
    if not summary(doc) and not (func.__name__ == "__init__" and extra_doc):
        return ["no docstring"]
    names = params(func, bound=bound)
    documented = arg_names(doc, "Args", "Arguments") | arg_names(extra_doc, "Args", "Arguments")
    missing = [name for name in names if name not in documented]
    if missing:
        problems.append(f"Args: lacks {missing}")
    stale = sorted(documented - set(names))
    if stale:
        problems.append(f"Args: names {stale}, which the signature lacks")
    returns = return_annotation(func)
    if func.__name__ != "__init__" and returns is not None and returns not in NO_RETURN:
        found = sections(doc)
        said = summary(doc).startswith("Return") or (returns == "bool" and summary(doc).startswith("Whether"))
        if not ("Returns" in found or "Yields" in found or said):
            problems.append(f"no Returns: (returns {returns})")
    unlisted = sorted(raised_in(func) - raises_names(both))
    if unlisted:
        problems.append(f"Raises: lacks {unlisted}")
    return problems


def generated_init(cls: type) -> list[str] | None:
    """The fields of a dataclass or NamedTuple whose ``__init__`` is generated, else None."""
    if dataclasses.is_dataclass(cls) and "__init__" in vars(cls) and not _has_source(vars(cls)["__init__"]):
        return [f.name for f in dataclasses.fields(cls) if f.init]
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return list(cls._fields)
    return None


def _has_source(func: Any) -> bool:
    try:
        inspect.getsource(func)
    except (OSError, TypeError):
        return False
    return True


def is_protocol(cls: type) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def class_problems(cls: type) -> Iterator[tuple[str, str]]:
    """(qualified name, problem) for a class and the members a user reaches on it."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    doc = own_doc(cls)
    if not summary(doc):
        yield name, "no docstring"
    fields = generated_init(cls)
    if fields is not None:
        documented = arg_names(doc, "Attributes", "Args", "Arguments")
        missing = [field for field in fields if field not in documented]
        if missing:
            yield name, f"Attributes: lacks fields {missing}"
    elif issubclass(cls, enum.Enum) or issubclass(cls, BaseException) and "__init__" not in vars(cls):
        pass
    elif not is_protocol(cls):
        init = next((vars(base)["__init__"] for base in cls.__mro__ if "__init__" in vars(base)), None)
        if init is not None and getattr(init, "__module__", "").startswith("vcollect"):
            for problem in function_problems(init, bound=True, extra_doc=doc):
                yield f"{init.__qualname__}", problem
    for member_name, owner, member in members(cls):
        qualified = f"{owner.__module__}.{owner.__qualname__}.{member_name}"
        if isinstance(member, property):
            if not summary(own_doc(member.fget)):
                yield qualified, "property without a docstring"
        elif isinstance(member, staticmethod):
            for problem in function_problems(member.__func__, bound=False):
                yield qualified, problem
        elif isinstance(member, classmethod):
            for problem in function_problems(member.__func__, bound=True):
                yield qualified, problem
        elif inspect.isfunction(member):
            for problem in function_problems(member, bound=True):
                yield qualified, problem


def members(cls: type) -> Iterator[tuple[str, type, Any]]:
    """Public methods and properties reached on cls, each at the class of vcollect that defines it."""
    seen: set[str] = set()
    for owner in cls.__mro__:
        if not owner.__module__.startswith("vcollect"):
            continue
        for member_name, member in vars(owner).items():
            if member_name in seen or (member_name.startswith("_") and member_name != "__call__"):
                continue
            seen.add(member_name)
            yield member_name, owner, member


def public_objects() -> Iterator[tuple[str, Any]]:
    seen: set[int] = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            try:
                obj = getattr(module, name)
            except ImportError:  # TorchPolicy/TianshouPolicy without their optional extra installed
                continue
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            yield f"{module_name}.{name}", obj


def offenders() -> list[str]:
    found: list[str] = []
    done: set[str] = set()
    for name, obj in public_objects():
        if inspect.isclass(obj):
            problems = list(class_problems(obj))
        else:
            problems = [(name, problem) for problem in function_problems(obj, bound=False)]
        for where, problem in problems:
            line = f"{where}: {problem}"
            if line not in done:
                done.add(line)
                found.append(line)
    return found


def test_public_names_have_google_style_docstrings() -> None:
    found = offenders()
    assert not found, f"{len(found)} docstring problems:\n" + "\n".join(found)


# --- no issue numbers or history in the code's text ----------------------------------------------------------

HISTORY = re.compile(
    r"(?<![\w/&])#\d+\b"  # an issue number (a URL's fragment or an HTML entity aside)
    r"|\bissue \d+"
    r"|\b(?:used to be|was moved|moved (?:here )?from|moved unchanged|previously|formerly|no more than before)\b"
    r"|\bbefore #",
    re.I,
)


def texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and string in a module."""
    source = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string.lstrip("#")
        elif token.type == tokenize.STRING:
            yield token.start[0], token.string


def test_no_issue_numbers_or_history_in_comments_and_docstrings() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in texts(path):
            for match in HISTORY.finditer(re.sub(r"https?://\S+", "", text)):
                found.append(f"{path.relative_to(REPO)}:{line}: {match.group(0)!r}")
    assert not found, "issue numbers or history in vcollect/'s text:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("# Before #16 vcollect emptied the buffer here", True),
        ("# see issue 25", True),
        ("# this was moved from ring.py", True),
        ("# https://github.com/o/r/issues/3#issuecomment-1", False),
        ("# the seed used to reset env 3", False),
    ],
)
def test_history_pattern(text: str, flagged: bool) -> None:
    assert bool(HISTORY.search(re.sub(r"https?://\S+", "", text))) is flagged


def test_docstring_rule_catches_what_it_should() -> None:
    def complete(a: int, *rest: int, b: str = "", **extra: Any) -> int:
        """Add up.

        Args:
            a: First.
            *rest: More.
            b (str): A label.
            **extra: Ignored.

        Returns:
            The sum.

        Raises:
            ValueError: When a is negative.
        """
        if a < 0:
            raise ValueError(b)
        return a + sum(rest)

    def lacking(a: int, b: int) -> int:
        """Add up.

        Args:
            a: First.
            c: Not a parameter.
        """
        if a < 0:
            raise ValueError(b)
        return a + b

    assert function_problems(complete, bound=False) == []
    assert function_problems(lacking, bound=False) == [
        "Args: lacks ['b']",
        "Args: names ['c'], which the signature lacks",
        "no Returns: (returns int)",
        "Raises: lacks ['ValueError']",
    ]
