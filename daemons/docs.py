"""`python -m daemons.docs --markdown | --example | --readme FILE`: the documents generated from
`core.base.config.config.KEYS` (what `make docs` runs): the README's configuration table and
`config/kb.example.toml`. A test fails when the committed copies drift from these.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from core.base.config.config_docs import (
    render_example_toml,
    render_markdown_table,
    with_readme_table,
)

USAGE = "usage: python -m daemons.docs --markdown | --example | --readme FILE"


def main(argv: Sequence[str] | None = None) -> int:
    """Print a generated document, or rewrite the README's table in place."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--markdown"]:
        sys.stdout.write(render_markdown_table())
        return 0
    if args == ["--example"]:
        sys.stdout.write(render_example_toml())
        return 0
    if len(args) == 2 and args[0] == "--readme":
        path = Path(args[1])
        try:
            path.write_text(with_readme_table(path.read_text(encoding="utf-8")),
                            encoding="utf-8")
        except ValueError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
