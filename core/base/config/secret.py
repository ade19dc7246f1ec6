"""A credential held in the settings (`Secret`): shown nowhere, revealed to one caller."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Secret:
    """A credential: its repr and str say only that it is there, so no log line, traceback,
    error or report that shows the object holding it can show the credential."""

    value: str = field(repr=False)

    def __repr__(self) -> str:
        return "Secret(<redacted>)"

    def __str__(self) -> str:
        return "<redacted>"

    def reveal(self) -> str:
        """The credential itself, for the one place that sends it (the Chroma client)."""
        return self.value
