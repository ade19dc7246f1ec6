"""Shared fixtures: real SQLite files and real embedded Chroma stores in temp folders.

Nothing here mocks the code under test. The only fakes are fault injectors (a Chroma call that
raises), used where the real store cannot fail on demand.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

# No test may write under the real $HOME (Chroma's model cache lives there) or send telemetry.
_FAKE_HOME = Path(tempfile.mkdtemp(prefix="kb-test-home-"))
os.environ["HOME"] = str(_FAKE_HOME)
os.environ["ANONYMIZED_TELEMETRY"] = "False"
os.environ.pop("KB_CONFIG", None)
# The suite runs under the umask every command sets and the units give, so a data folder a
# test makes by hand is owner-only, as the commands require (they refuse one others can
# reach). The tests of what is created under the usual umask 022 ask for it (`umask_022`);
# a folder another user must pass through is opened to it explicitly (tests/other_user.py).
SESSION_UMASK = 0o077
os.umask(SESSION_UMASK)

from core.base.chroma import VectorStore  # noqa: E402
from core.base.config.config import Settings  # noqa: E402
from core.base.runtime.logs import configure_logging  # noqa: E402
from core.base.state.graph_db import GraphDB  # noqa: E402
from core.base.state.state import open_graph  # noqa: E402
from tests.chroma_server import ChromaServer  # noqa: E402
from tests.postgres_server import PostgresServer  # noqa: E402
from tests.support import make_settings  # noqa: E402

configure_logging("json")

@pytest.fixture(autouse=True)
def umask_kept() -> Iterator[None]:
    """Each test starts with the session's umask, whatever the one before set (a command run
    in-process sets it, `core.base.runtime.process`; a test may set another)."""
    os.umask(SESSION_UMASK)
    yield
    os.umask(SESSION_UMASK)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The test, and the commands it starts, run under the usual umask 022 (what an operator's
    shell has), not the session's 077."""
    os.umask(0o022)
    yield
    os.umask(SESSION_UMASK)


@pytest.fixture(scope="session", autouse=True)
def nothing_written_under_home() -> Iterator[None]:
    """Fails the run if any test (or library it calls) wrote under $HOME."""
    yield
    leftovers = [str(p.relative_to(_FAKE_HOME)) for p in _FAKE_HOME.rglob("*")]
    assert leftovers == [], f"tests wrote under $HOME: {leftovers}"


#: The backends a module marked `both_backends` runs its `graph` tests on.
BACKENDS = ("sqlite", "postgres")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_backends: run every test of the module that uses "
                            "the state store on SQLite and on PostgreSQL")
    config.addinivalue_line("markers", "sqlite_only(reason): a test of SQLite itself (its "
                            "file, pragmas, rowid), not of the seam")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Store-level modules (marked `both_backends`) run each state test on both backends."""
    marked = metafunc.definition.get_closest_marker
    if "backend" in metafunc.fixturenames and marked("both_backends") is not None \
            and marked("sqlite_only") is None:
        metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL 15 for the session, started on first use; failing to start it
    fails the tests that need it (never a skip)."""
    server = PostgresServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def restartable_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL 15 of the test module's own, which its tests restart, halt and resume (the
    session's server is shared by every other test of the worker)."""
    server = PostgresServer(prefix="kb-test-pg-restart-")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def chroma(tmp_path: Path) -> Iterator[ChromaServer]:
    """A real `chroma run` on a folder of the test's own, stopped after the test."""
    server = ChromaServer(tmp_path / "chroma-server", home=tmp_path / "chroma-home")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def settings(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Settings:
    """Settings over `tmp_path`; on the PostgreSQL backend, `stateUrl` names a fresh database."""
    if backend == "sqlite":
        return make_settings(tmp_path)
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return make_settings(tmp_path, stateUrl=server.create_database(f"t{next(_databases)}"))


@pytest.fixture
async def graph(settings: Settings) -> AsyncIterator[GraphDB]:
    db = await open_graph(settings.state)
    yield db
    await db.close()


@pytest.fixture
async def vectors(settings: Settings) -> AsyncIterator[VectorStore]:
    store = await VectorStore.open(settings.chroma)
    yield store
    await store.close()


@pytest.fixture
def chroma_fault(vectors: VectorStore, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make one (collection, method) of the real store raise, to stand for a Chroma failure."""

    def inject(collection: str, method: str = "get", error: Exception | None = None) -> None:
        real = vectors._call_on_collection

        def failing(name: str, called: str, kwargs: Mapping[str, Any]) -> Any:
            if name == collection and called == method:
                raise error or ConnectionError(f"injected {method} failure on {name}")
            return real(name, called, kwargs)

        monkeypatch.setattr(vectors, "_call_on_collection", failing)

    return inject
