"""Building the chromadb client: a server's (`chromaUrl`, with its tenant, database, token and
CA file) or an embedded store's (`chromaPath`), and the stand-in for an embedded store a dry
run must not create.

Every client is built with telemetry off and reset refused; collections are opened with no
embedding function (`core.base.chroma.connection`), so nothing can download a model or phone
home.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import structlog

from core.base.chroma.errors import CollectionMissing, VectorStoreError
from core.base.config.chroma_server import auth_header
from core.base.io.files import make_private_dirs

if TYPE_CHECKING:
    from core.base.config.config_settings import ChromaSettings

# The package's name, so log lines name the adapter as they did when it was one module.
log = structlog.get_logger(__package__)

#: The lock file inside an embedded store folder.
STORE_LOCK_NAME = ".kb-daemons.lock"
#: The file an embedded store holds once Chroma has opened it.
EMBEDDED_STORE_FILE = "chroma.sqlite3"


class AbsentStore:
    """The client of an embedded store that does not exist, for a dry run: every collection
    is missing, and creating one is refused (nothing may be created)."""

    def __init__(self, description: str) -> None:
        self.description = description

    def get_max_batch_size(self) -> int:
        return 1

    def get_collection(self, name: str, **_: Any) -> Any:
        raise CollectionMissing(f"collection {name!r} not found in {self.description}")

    def get_or_create_collection(self, name: str, **_: Any) -> Any:
        raise VectorStoreError(f"{self.description}: a dry run creates nothing ({name!r})")

    def close(self) -> None:
        """Nothing to release."""


def make_client(settings: ChromaSettings) -> Any:
    """Build the chromadb client; imported lazily because `import chromadb` costs seconds that
    commands such as `enqueue` and `status` should not pay."""
    started = time.monotonic()
    import chromadb
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT
    from chromadb.config import Settings as ClientSettings

    tenant = settings.tenant or DEFAULT_TENANT
    database = settings.database or DEFAULT_DATABASE
    server = settings.server
    if server is not None:
        ca_file = settings.ca_file
        chroma_settings = ClientSettings(
            anonymized_telemetry=False, allow_reset=False,
            # None keeps httpx's default: certificates verified against the system's CAs.
            chroma_server_ssl_verify=str(ca_file) if ca_file is not None and server.tls
            else None)
        token = settings.token
        # The client takes a full URL as its host (a path prefix included) and then ignores
        # `port`; without a port in the URL, the scheme's default applies.
        client = chromadb.HttpClient(
            host=server.url,
            port=server.effective_port,
            ssl=server.tls,
            headers=auth_header(settings.auth_header, token.reveal())
            if token is not None else None,
            settings=chroma_settings,
            tenant=tenant,
            database=database,
        )
    else:
        chroma_settings = ClientSettings(anonymized_telemetry=False, allow_reset=False)
        make_private_dirs(settings.path)
        client = chromadb.PersistentClient(path=str(settings.path),
                                           settings=chroma_settings, tenant=tenant,
                                           database=database)
    log.debug("vectors.client_opened", seconds=round(time.monotonic() - started, 3))
    return client
