"""The layout holds: checks that walk the source, so the design in the folder names stays true.

- the import contracts (`.importlinter`) pass, and breaking one (a rule importing a store)
  fails `lint-imports`;
- no function in core/ is longer than MAX_FUNCTION_LINES, no module than MAX_MODULE_LINES,
  no folder holds more than MAX_FOLDER_MODULES modules;
- no SQL text, and no call that runs SQL, outside the stores (the state's backends in
  core/base/state/ and each wing's stores/);
- no Chroma call outside the Chroma adapter (the package core/base/chroma/);
- exactly one module outside the stores deletes from the vector store: the deletion engine;
- the reconcile wing imports at the top of its modules (numpy aside) and in no circle;
- the tests live in the folder of the layer they test; those of the pure rules (tests/rules/)
  import and load nothing but pure rules (and the tests' oracles, pure too), and every rule
  module has a direct test.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO

MAX_FUNCTION_LINES = 60
#: A module longer than this does more than one thing: make it a package (issue #24).
MAX_MODULE_LINES = 400
#: A folder of more modules than this (its __init__ counted) stops showing its design: cut it
#: by the ideas it holds (issue #33).
MAX_FOLDER_MODULES = 15
CORE = REPO / "core"
WINGS = ("drain", "reconcile", "alerting")
#: The Chroma adapter: the one package that imports chromadb and calls the client.
CHROMA_ADAPTER = CORE / "base" / "chroma"
#: Where SQL and the vector store's calls live: the state's backends, each wing's stores and
#: the Chroma adapter.
STORES = (CORE / "base" / "state", CHROMA_ADAPTER, *(CORE / wing / "stores" for wing in WINGS))
#: The pure rules: each wing's and the base's `rules`, and the base's `config`.
RULE_PACKAGES = (CORE / "base" / "rules", CORE / "base" / "config",
                 *(CORE / wing / "rules" for wing in WINGS))
#: The one module that may call the vector store's deletes (every deletion reason is a plan
#: handed to its band runner).
DELETION_ENGINE = CORE / "reconcile" / "deletion.py"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: The wing whose modules import at the top and in no circle (issue #33), and the libraries a
#: function there may still import when first used (start-up speed: numpy is heavy).
TOP_IMPORTS_WING = CORE / "reconcile"
LAZY_LIBRARIES = {"numpy"}

#: SQL as it is written in a string: a statement's opening words.
SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
    r"|CREATE\s+(TABLE|INDEX)|DROP\s+TABLE|ALTER\s+TABLE|PRAGMA\s+\w+|BEGIN\s+IMMEDIATE)",
    re.DOTALL,
)
#: Calls that run SQL (the connection's API, for the stores only).
SQL_CALLS = {"query", "execute", "executemany", "executescript", "execute_fetchall"}
#: What only the Chroma adapter may touch: the client, its collections, and the call path.
CHROMA_ONLY = {"_client", "_collections", "_call_on_collection", "get_collection",
               "get_or_create_collection", "create_collection", "delete_collection"}


def python_files(*roots: Path) -> Iterator[Path]:
    for root in roots:
        yield from sorted(root.rglob("*.py"))


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"


def imported_modules(tree: ast.Module) -> Iterator[tuple[ast.AST, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node, node.module


def test_the_import_contracts_hold() -> None:
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=REPO, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module", ["core/base/rules/numbers.py",
                                    "core/reconcile/rules/archives/format.py"])
def test_a_rule_that_imports_a_store_breaks_the_contracts(tmp_path: Path, module: str) -> None:
    """A rule of a sub-package of the rules (a concern inside the layer) is held too."""
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("core", "daemons"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", copy / ".importlinter")
    rule = copy / module
    rule.write_text(rule.read_text(encoding="utf-8") + "\nimport core.base.state.sqlite  # noqa\n",
                    encoding="utf-8")
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=copy, capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0, "lint-imports must fail (and so make lint and CI)"
    importer = module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> core.base.state.sqlite" in done.stdout
    assert "rules do no I/O" in done.stdout and "BROKEN" in done.stdout


@pytest.mark.parametrize(("module", "imports"), [
    ("core/drain/batches.py", "core.reconcile.deletion"),
    ("core/reconcile/run_pass.py", "core.drain"),
])
def test_the_wings_never_import_each_other(
    tmp_path: Path, module: str, imports: str,
) -> None:
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("core", "daemons"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", copy / ".importlinter")
    source = copy / module
    source.write_text(source.read_text(encoding="utf-8") + f"\nimport {imports}  # noqa\n",
                      encoding="utf-8")
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=copy, capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0, "lint-imports must fail (and so make lint and CI)"
    assert "BROKEN" in done.stdout and "the wings stand alone" in done.stdout


@pytest.mark.parametrize("module", ["core/base/door/chroma_door.py", "core/drain/live_ingest.py"])
def test_a_chromadb_import_outside_the_chroma_package_breaks_the_contracts(
    tmp_path: Path, module: str,
) -> None:
    """The contract lets the adapter's modules (`core.base.chroma.**`) import chromadb and
    nothing else: not even `chroma_door`, whose name starts like the package's."""
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("core", "daemons"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", copy / ".importlinter")
    source = copy / module
    source.write_text(source.read_text(encoding="utf-8") + "\nimport chromadb  # noqa\n",
                      encoding="utf-8")
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=copy, capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0, "lint-imports must fail (and so make lint and CI)"
    importer = module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> chromadb" in done.stdout
    assert "only the Chroma adapter" in done.stdout and "BROKEN" in done.stdout


def test_no_function_in_core_is_longer_than_the_limit() -> None:
    long = [f"{where(path, node)} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in python_files(CORE)
            for node in ast.walk(parsed(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == [], f"split these (limit {MAX_FUNCTION_LINES} lines)"


def test_no_module_in_core_is_longer_than_the_limit() -> None:
    long = [f"{path.relative_to(REPO)} ({lines} lines)" for path in python_files(CORE)
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert long == [], f"make each a package of modules that do one thing ({MAX_MODULE_LINES})"


def test_no_folder_in_core_holds_more_than_the_limit() -> None:
    crowded = [f"{folder.relative_to(REPO)} ({modules} modules)"
               for folder in sorted({CORE, *(path.parent for path in python_files(CORE))})
               if (modules := len(list(folder.glob("*.py")))) > MAX_FOLDER_MODULES]
    assert crowded == [], f"cut each by the ideas it holds ({MAX_FOLDER_MODULES} modules)"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_reconcile_wing_imports_nothing_inside_a_function() -> None:
    found = [f"{where(path, node)} {name}" for path in python_files(TOP_IMPORTS_WING)
             for function in ast.walk(parsed(path))
             if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node, name in imported_modules(ast.Module(body=function.body, type_ignores=[]))
             if name.split(".")[0] not in LAZY_LIBRARIES]
    assert found == [], "import at the top of the module (a circle is cut by moving a name)"


def test_the_reconcile_wing_imports_in_no_circle() -> None:
    """Not even through imports made for type checking only: a circle hidden under
    `TYPE_CHECKING` is still two modules that need each other."""
    modules = {module_name(path): path for path in python_files(TOP_IMPORTS_WING)}
    imports: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imports[name] |= {target for target in (node.module, *(
                    f"{node.module}.{alias.name}" for alias in node.names)) if target in modules}
            elif isinstance(node, ast.Import):
                imports[name] |= {alias.name for alias in node.names if alias.name in modules}
        imports[name].discard(name)
    circles = []
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            circles.append(" -> ".join([*trail[trail.index(name):], name]))
            return
        if name in done:
            return
        for target in sorted(imports[name]):
            visit(target, [*trail, name])
        done.add(name)

    for name in sorted(modules):
        visit(name, [])
    assert circles == []


def outside_stores() -> Iterator[Path]:
    for path in python_files(CORE, REPO / "daemons"):
        if not any(store in path.parents for store in STORES):
            yield path


def string_literals(tree: ast.Module) -> Iterator[tuple[ast.AST, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node, node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "?"
                           for v in node.values)
            yield node, text


def test_no_sql_text_outside_the_stores() -> None:
    found = [f"{where(path, node)}: {text.strip()[:60]!r}"
             for path in outside_stores()
             for node, text in string_literals(parsed(path)) if SQL.search(text)]
    assert found == [], "every SQL statement lives in the stores"


def test_nothing_outside_the_stores_runs_sql_or_opens_a_connection() -> None:
    found = []
    for path in outside_stores():
        tree = parsed(path)
        found += [f"{where(path, node)}: .{node.func.attr}()" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in SQL_CALLS]
        found += [f"{where(path, node)}: .{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr in {"conn", "_conn"}]
        found += [f"{where(path, node)}: import {name}" for node, name in imported_modules(tree)
                  if name.split(".")[0] in {"sqlite3", "aiosqlite"}]
    assert found == []


def test_no_chroma_call_outside_the_chroma_adapter() -> None:
    found = []
    for path in python_files(CORE, REPO / "daemons"):
        if CHROMA_ADAPTER in path.parents:
            continue
        tree = parsed(path)
        found += [f"{where(path, node)}: import {name}" for node, name in imported_modules(tree)
                  if name.split(".")[0] == "chromadb"]
        found += [f"{where(path, node)}: .{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr in CHROMA_ONLY]
    assert found == [], "Chroma is reached through core.base.chroma.VectorStore only"


def vector_store_deletes() -> Iterator[str]:
    """Every call of a `VectorStore` method that deletes (its `delete*` methods), outside the
    stores, as `path:line .name()`."""
    deleting = {node.name for path in python_files(CHROMA_ADAPTER)
                for node in ast.walk(parsed(path))
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name.startswith("delete") and node.name not in CHROMA_ONLY}
    assert "delete_where" in deleting
    for path in outside_stores():
        for node in ast.walk(parsed(path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in deleting):
                yield f"{where(path, node)} .{node.func.attr}()"


def test_exactly_one_module_deletes_from_the_vector_store() -> None:
    modules = {call.split(":")[0] for call in vector_store_deletes()}
    assert modules == {str(DELETION_ENGINE.relative_to(REPO))}, (
        "every deletion goes through the one band runner: hand it a DeletionPlan")


TESTS = REPO / "tests"
#: The tests of the pure rules: every test module under tests/rules/.
RULES_TESTS = TESTS / "rules"
PURE_RULE_TESTS = tuple(f"tests.rules.{path.stem}"
                        for path in sorted(RULES_TESTS.glob("test_*.py")))
#: The tests' oracles (the original's whole-list engines): pure, so a rules test may use them.
ORACLES = TESTS / "oracles.py"
#: What such a test must not load, even indirectly.
STORE_MODULES = ("chromadb", "aiosqlite", "asyncpg", "sqlite3", "httpx", "daemons")
#: The only modules of core/ such a test may load: the pure rules and their packages.
PURE = re.compile(r"core(\.base|\.drain|\.reconcile|\.alerting)?(\.(rules|config)(\.\w+)*)?")
#: The layer folders tests live in, like the code they test; the only test modules at the top
#: are about the whole repository.
TEST_FOLDERS = {"rules", "stores", "jobs", "runtime", "reports", "commands", "reliability"}
TOP_LEVEL_TESTS = {"test_structure.py", "test_benchmarks_smoke.py",
                   "test_benchmarks_smoke_reconcile.py"}


def test_tests_live_in_the_folder_of_the_layer_they_test() -> None:
    top = {path.name for path in TESTS.glob("test_*.py")}
    assert top <= TOP_LEVEL_TESTS, f"move into tests/<layer>/: {sorted(top - TOP_LEVEL_TESTS)}"
    folders = {path.parent.name for path in TESTS.glob("*/test_*.py")}
    assert folders == TEST_FOLDERS


def test_nothing_under_the_rules_tests_imports_a_store() -> None:
    files = sorted(RULES_TESTS.rglob("*.py"))
    assert any(path.name.startswith("test_") for path in files), "tests/rules/ holds tests"
    found = [f"{where(path, node)} {name}" for path in [*files, ORACLES]
             for node, name in imported_modules(parsed(path))
             if name.startswith(STORE_MODULES)
             or (name.startswith("tests.") and name != "tests.oracles")
             or (name.startswith("core") and not PURE.fullmatch(name))]
    assert found == [], "a rules test uses plain data only (tests.support opens stores)"


def rule_modules() -> list[str]:
    """Every module of the pure rule packages and their sub-packages (the __init__s aside)."""
    return sorted(".".join(path.relative_to(REPO).with_suffix("").parts)
                  for package in RULE_PACKAGES for path in package.rglob("*.py")
                  if path.stem != "__init__")


def test_every_pure_rule_module_has_a_direct_test() -> None:
    imported = {name for path in python_files(TESTS) if path.name.startswith("test_")
                for _, name in imported_modules(parsed(path))}
    untested = [module for module in rule_modules() if module not in imported]
    assert untested == [], "each rule module is imported by a test of its own behaviour"


@pytest.mark.parametrize("module", PURE_RULE_TESTS)
def test_tests_of_pure_rules_load_no_store(module: str) -> None:
    probe = (f"import importlib, re, sys; importlib.import_module({module!r}); "
             f"print('\\n'.join(m for m in sys.modules if m.startswith({STORE_MODULES!r}) "
             f"or (m.startswith('core') and not re.fullmatch({PURE.pattern!r}, m))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
