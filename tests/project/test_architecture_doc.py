"""``docs/architecture.md`` names only what exists, and draws the layers import-linter holds.

The page is for the next maintainer, so a name on it that no longer exists misleads. Here:

* every dotted path ``acmecerts.x.y`` on the page imports (a module, or a name in one);
* every file or directory path on the page exists (from the project root, ``acmecerts/``
  or ``docs/``; a bare ``_module.py`` must exist somewhere under ``acmecerts/``);
* every class, constant or function the page names (a code span such as ``Entry``,
  ``CaOutage.admit()`` or ``due_at()``, and the class and call names of its diagrams) is
  defined in the package;
* the layer table and the layer diagram list the layers of the ``layers`` contract of
  ``pyproject.toml``, in its order, and the table of the other contracts says exactly
  what each of them holds and forbids;
* the page is in the site's navigation.

The last tests feed the checks a page with a name that does not exist, so a check that
stopped finding anything would fail too.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "acmecerts"

_FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"(?<![\w./-])acmecerts(?:\.[A-Za-z_]\w*)+")
#: A file (by its suffix) or a directory (a trailing ``/``), as the page writes paths.
_PATH = re.compile(
    r"(?<![\w./-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|md|toml|yml|yaml)|(?:[\w.-]+/)+)(?![\w/])"
)
#: A name a code span gives: ``Entry``, ``SCENARIOS``, ``CaOutage.admit()``, ``due_at()``.
_NAME_SPAN = re.compile(r"_?[A-Z]\w*(?:\.\w+)*(?:\(\))?|[a-z_]\w*(?:\.\w+)*\(\)")
#: In a diagram: class names of two humps or more (``IssuanceFlow``), ``Class.method``.
_DIAGRAM_CLASS = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?:\.[a-z_]\w*)?\b")
#: In a diagram: calls (``next_action(now)``, ``solver.present(task)``).
_DIAGRAM_CALL = re.compile(r"(?<![\w.])(?:[a-z_]\w*\.)?([a-z_]\w*)\(")
#: Single-hump names the diagrams use for actions and classes (checked like the others).
_DIAGRAM_WORDS = re.compile(
    r"\b(?:Authorize|Present|Answer|Poll|Finalize|Diagnose|Download|Finish|Fail|Entry|"
    r"Scheduler|Storage)\b"
)


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _contracts() -> list[dict[str, Any]]:
    contracts: list[dict[str, Any]] = _pyproject()["tool"]["importlinter"]["contracts"]
    return contracts


def contract_layers() -> list[list[str]]:
    """The ``layers`` contract's layers, top first, each as its module names."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in layers["layers"]]


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The body of the section under ``heading`` (a whole ``#...`` line), up to the next
    heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n") + len(heading) + 1
    ends = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE)
    masked = _masked(text)
    found = ends.search(masked, start)
    return text[start : found.start() if found else len(text)]


def _masked(text: str) -> str:
    """``text`` with the bodies of its fenced blocks blanked (a ``#`` in them is no heading)."""
    return _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of ``text``: (language, body)."""
    return [(m["info"].strip(), m["body"]) for m in _FENCE.finditer(text)]


def prose(text: str) -> str:
    """``text`` without its fenced blocks."""
    return _FENCE.sub("", text)


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text``, as cells."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"no table in:\n{text[:300]}"
    return rows[2:]  # the header and its |---| line


def spans(cell: str) -> list[str]:
    return _SPAN.findall(cell)


# -- what exists --------------------------------------------------------------------------


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:cut]).startswith(exc.name):
                raise
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ModuleNotFoundError(dotted)


def missing_dotted(text: str) -> list[str]:
    missing = []
    for dotted in sorted(set(_DOTTED.findall(text))):
        try:
            resolve(dotted)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{dotted}: {exc}")
    return missing


def missing_paths(text: str) -> list[str]:
    missing = []
    for path in sorted(set(_PATH.findall(text))):
        bases = (ROOT, PACKAGE, ROOT / "docs")
        if any((base / path).exists() for base in bases):
            continue
        if "/" not in path and any(PACKAGE.rglob(path)):
            continue  # ``_persist.py`` beside the package it is named in
        missing.append(path)
    return missing


@functools.cache
def definitions() -> dict[str, list[str]]:
    """Every name the package defines (classes, functions and methods, module constants,
    class attributes), each with the modules that define it."""
    found: dict[str, list[str]] = {}
    for file in sorted(PACKAGE.rglob("*.py")):
        parts = file.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for name in names:
                found.setdefault(name, []).append(module)
    return found


def defined(name: str) -> bool:
    """Whether ``name`` (``X``, ``X()`` or ``X.attr``) is defined in the package."""
    name = name.removesuffix("()")
    head, _, rest = name.partition(".")
    if head in dir(builtins) and not rest:
        return True
    modules = definitions().get(head, [])
    if not rest:
        return bool(modules)
    for module in modules:  # ``Class.attr``: inherited attributes count
        owner = getattr(importlib.import_module(module), head, None)
        if owner is not None and _has(owner, rest):
            return True
    return False


def _has(obj: object, dotted: str) -> bool:
    for attribute in dotted.split("."):
        if attribute in getattr(obj, "__annotations__", {}):
            return True  # a field with no default (``Entry.spec``), or a Protocol's
        if not hasattr(obj, attribute):
            return False
        obj = getattr(obj, attribute)
    return True


def named(text: str) -> set[str]:
    """The names ``text`` gives: its code spans of names, and the diagrams' classes and
    calls."""
    names = {span for span in _SPAN.findall(prose(text)) if _NAME_SPAN.fullmatch(span)}
    names = {n for n in names if not n.startswith("acmecerts.")}  # checked by resolve()
    for language, body in blocks(text):
        if language != "text":
            continue
        names.update(_DIAGRAM_CLASS.findall(body))
        names.update(_DIAGRAM_WORDS.findall(body))
        names.update(f"{call}()" for call in _DIAGRAM_CALL.findall(body))
    return names


def undefined(text: str) -> list[str]:
    return sorted(name for name in named(text) if not defined(name))


# -- the tests ----------------------------------------------------------------------------


def test_every_dotted_path_imports() -> None:
    text = page_text()
    assert len(set(_DOTTED.findall(text))) >= 10, "the page names acmecerts.x.y paths"
    assert not missing_dotted(text), "\n".join(missing_dotted(text))


def test_every_file_path_exists() -> None:
    text = page_text()
    assert len(set(_PATH.findall(text))) >= 30, "the page names files"
    assert not missing_paths(text), missing_paths(text)


def test_every_class_and_function_named_is_defined() -> None:
    text = page_text()
    names = named(text)
    for expected in ("IssuanceFlow", "Entry", "CaOutage.admit", "due_at()", "next_action()"):
        assert expected in names, f"the checker no longer finds {expected}"
    assert not undefined(text), undefined(text)


def layer_table_errors(text: str) -> list[str]:
    """What the layer table says that the ``layers`` contract does not."""
    rows = table_rows(section(text, "## The layers"))
    errors = []
    drawn = [spans(row[0]) for row in rows]
    if drawn != contract_layers():
        errors.append(f"the table's layers {drawn} are not the contract's {contract_layers()}")
    errors += [f"say the job of {row[0]} in a sentence" for row in rows if not row[1].endswith(".")]
    return errors


def layer_diagram_errors(text: str) -> list[str]:
    """What the layer diagram draws otherwise than the ``layers`` contract: each layer on
    one row of boxes, every module of it there once, top first."""
    (language, diagram), *_ = blocks(section(text, "## The layers"))
    if language != "text":
        return [f"the diagram is a {language!r} block, not a text one"]
    # the boxes only: the notes at the right name contracts (``protocol-no-io``)
    lines = [line[: line.rfind("│") + 1] for line in diagram.splitlines()]
    errors = []
    previous = -1
    for layer in contract_layers():
        rows = set()
        for module in layer:
            drawn = re.compile(rf"(?<![\w.]){re.escape(module)}(?:/|\.py)?(?![\w.])")
            hits = [i for i, line in enumerate(lines) if drawn.search(line)]
            if len(hits) != 1:
                errors.append(f"{module} is drawn {len(hits)} times, not once")
            rows.update(hits)
        if len(rows) > 1:
            errors.append(f"the modules of layer {layer} are on several rows")
        elif rows:
            (row,) = rows
            if row <= previous:
                errors.append(f"layer {layer} is not drawn below the layer before it")
            previous = row
    return errors


def test_the_layer_table_is_the_contracts_layers() -> None:
    assert not layer_table_errors(page_text()), layer_table_errors(page_text())


def test_the_layer_diagram_draws_the_contracts_layers() -> None:
    assert not layer_diagram_errors(page_text()), layer_diagram_errors(page_text())


def test_the_other_contracts_are_as_pyproject_says() -> None:
    rows = table_rows(section(page_text(), "### The other contracts"))
    by_id = {spans(row[0])[0]: row for row in rows}
    others = [c for c in _contracts() if c["type"] != "layers"]
    assert sorted(by_id) == sorted(c["id"] for c in others)
    for contract in others:
        row = by_id[contract["id"]]
        assert spans(row[1]) == contract["source_modules"], contract["id"]
        if contract["type"] == "forbidden":
            assert spans(row[2]) == contract["forbidden_modules"], contract["id"]
            indirect = contract.get("allow_indirect_imports", False)
            assert ("indirect imports allowed" in row[2]) == indirect, contract["id"]


def test_the_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = [next(iter(entry.values())) for entry in config["nav"] if isinstance(entry, dict)]
    assert "architecture.md" in pages


# -- the checks are not vacuous ---------------------------------------------------------------


def test_the_checks_find_what_does_not_exist() -> None:
    page = (
        "`acmecerts.manager._entry.Entry` and `acmecerts.manager._core.FleetHeart` run in\n"
        "`acmecerts/manager/_entry.py` and `acmecerts/manager/_heart.py`, and `_nothere.py`.\n"
        "`Entry`, `FleetHeart`, `due_at()`, `wake_at()`, `CaOutage.admit()` and\n"
        "`CaOutage.probe_now()`.\n\n"
        "```text\nIssuanceFlow ──▶ FlowCore.step()\n  next_action(now) · next_actions(now)\n```\n"
    )
    assert [m.split(":")[0] for m in missing_dotted(page)] == ["acmecerts.manager._core.FleetHeart"]
    assert missing_paths(page) == ["_nothere.py", "acmecerts/manager/_heart.py"]
    assert undefined(page) == [
        "CaOutage.probe_now()",
        "FleetHeart",
        "FlowCore.step",
        "next_actions()",
        "wake_at()",
    ]


def test_a_layer_drawn_otherwise_fails() -> None:
    """The layer checks compare the page with pyproject.toml: a layer moved, merged or
    left out of the table or the diagram fails."""
    text = page_text()
    manager = "| `manager`, `attempts` |"
    client = "| `client`, `solvers`, `storage` |"
    assert manager in text
    assert client in text
    swapped = text.replace(manager, "@").replace(client, manager).replace("@", client)
    assert layer_table_errors(swapped)
    assert layer_table_errors(text.replace("`manager`, `attempts`", "`manager`"))
    row = "│ _issued.py "
    assert row in text
    assert layer_diagram_errors(text.replace(row, "│ _issuedx.py"))
    # _issued.py drawn on the row of protocol/, above it: one row too many, then the order
    merged = text.replace(row, "│ retry.py   ").replace("│ protocol/  ", "│ _issued.py ")
    assert layer_diagram_errors(merged)
    # two rows exchanged
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("│ cli/ "))
    low = next(i for i, line in enumerate(lines) if line.startswith("│ transport/ "))
    lines[top], lines[low] = lines[low], lines[top]
    errors = layer_diagram_errors("\n".join(lines))
    assert any("not drawn below" in error for error in errors), errors
