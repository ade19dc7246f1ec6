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

from core.rules.config import Settings  # noqa: E402
from core.runtime.logs import configure_logging  # noqa: E402
from core.stores.chroma import VectorStore  # noqa: E402
from core.stores.graph_db import GraphDB  # noqa: E402
from core.stores.state import open_graph  # noqa: E402
from tests.support import make_settings  # noqa: E402

configure_logging("json")

@pytest.fixture(scope="session", autouse=True)
def nothing_written_under_home() -> Iterator[None]:
    """Fails the run if any test (or library it calls) wrote under $HOME."""
    yield
    leftovers = [str(p.relative_to(_FAKE_HOME)) for p in _FAKE_HOME.rglob("*")]
    assert leftovers == [], f"tests wrote under $HOME: {leftovers}"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
async def graph(settings: Settings) -> AsyncIterator[GraphDB]:
    db = await open_graph(settings)
    yield db
    await db.close()


@pytest.fixture
async def vectors(settings: Settings) -> AsyncIterator[VectorStore]:
    store = await VectorStore.open(settings)
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
