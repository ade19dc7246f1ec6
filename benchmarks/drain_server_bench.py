"""Drain benchmark over a Chroma server: `benchmarks.drain_bench`'s workload, drainer and floor,
with every Chroma call a request to a `chroma run` on 127.0.0.1 that this benchmark starts (one
per contender run, on that run's fresh copy of the seeded store), where per-call latency is
what the drainer's batching is for.

    python -m benchmarks.drain_server_bench [--smoke] [--repeats N]
    python -m benchmarks.drain_server_bench --contender NAME --data ROOT --url URL  # (child)

The workload, the seeding and both contenders are `benchmarks.drain_bench`'s own (imported, not
copied); only the store they talk to differs. The per-edge baseline is left out: one request
per endpoint over HTTP would take most of an hour at full size.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import drain_bench
from benchmarks.bare_stores import settings_for
from benchmarks.harness import emit_report, set_up_child

MODULE = "benchmarks.drain_server_bench"
CONTENDERS = ("drainer", "floor")


def run_contender(name: str, root: Path, url: str) -> dict[str, Any]:
    """(child) `drain_bench`'s contender, its stores pointed at the server at `url`."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    set_up_child()
    host, port = url.removeprefix("http://").split(":")

    def server_settings(root: Path, **overrides: Any) -> Any:
        return settings_for(root, chromaUrl=url, **overrides)

    def server_client(_settings: Any) -> Any:
        return chromadb.HttpClient(host=host, port=int(port),
                                   settings=ChromaSettings(anonymized_telemetry=False))

    # The one seam: drain_bench's children look their stores up by these two names.
    vars(drain_bench).update(settings_for=server_settings, open_chroma=server_client)
    return drain_bench.run_contender(name, root)


def run_server_benchmark(sizes: drain_bench.DrainSizes, *, repeats: int = 1) -> dict[str, Any]:
    """Seed once (embedded, as `drain_bench` does), then per contender run: a fresh copy, a
    `chroma run` over its store, the contender, the server stopped."""
    from tests.chroma_server import ChromaServer

    @contextmanager
    def server_for(root: Path, workdir: Path) -> Iterator[list[str]]:
        server = ChromaServer(settings_for(root).chroma.path, home=workdir / "home")
        server.start()
        try:
            yield ["--url", server.url]
        finally:
            server.stop()

    result = drain_bench.run_variant(MODULE, "drain-server", sizes, repeats=repeats,
                                     contenders=CONTENDERS, seed_module=drain_bench.MODULE,
                                     around=server_for)
    for target in result["targets"]:
        target["name"] = target["name"].replace("drain:", "drain (server):", 1)
    return result


def table(result: dict[str, Any]) -> str:
    """The server-mode drain section of the printed table."""
    return drain_bench.table(result).replace(
        "Drain:", "Drain over a Chroma server (chroma run on 127.0.0.1):", 1)


def main(argv: Sequence[str] | None = None) -> int:
    """Child or parent, by flags."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--contender", choices=CONTENDERS, help="(child) run one contender")
    parser.add_argument("--data", type=Path, metavar="ROOT", help="(child) the seeded root")
    parser.add_argument("--url", help="(child) the server's URL")
    args = parser.parse_args(argv)
    if args.contender is not None:
        if args.data is None or args.url is None:
            parser.error("--contender needs --data ROOT and --url URL")
        emit_report(run_contender(args.contender, args.data, args.url))
        return 0
    result = run_server_benchmark(
        drain_bench.SMOKE_SIZES if args.smoke else drain_bench.FULL_SIZES, repeats=args.repeats)
    print(table(result))
    emit_report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
