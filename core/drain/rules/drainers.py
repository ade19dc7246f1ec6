"""The drainers of a state: which are gone, how one is shown and named (pure).

Every drainer that ever ticked on a state keeps one row there (`drainer_ticks`): status and
/metrics show each. A drainer whose last recorded tick finished more than
`drainerGoneIntervals` x `remIntervalMs` ago is **gone** (a retired host, or a SQLite file's
drainer after kb-migrate moved the state to PostgreSQL); it is shown as gone, and only a gone
drainer may be forgotten (`kb-drain forget`), since a live one would write its row again at
its next tick. A drainer that ticks again is present again.

An operator names a drainer as status shows it: its id (32 hex digits) or a prefix of it
that only it has, or `(single)` for a SQLite file's one drainer, whose id is ''.
"""

from __future__ import annotations

from collections.abc import Collection

from core.base.rules.errors import ConfigError

#: How status shows the id '' of a SQLite file's one drainer, and how an operator names it.
SINGLE = "(single)"
#: The id characters status shows; a prefix this long names a drainer among any few.
SHOWN_ID_CHARS = 12


def gone_after_ms(interval_ms: int, intervals: int) -> int:
    """How long a drainer may go without a recorded tick before it is gone."""
    return interval_ms * intervals


def is_gone(finished_at_ms: int, now_ms: int, *, interval_ms: int, intervals: int) -> bool:
    """Whether a drainer whose last tick finished at `finished_at_ms` is gone at `now_ms`."""
    return now_ms - finished_at_ms > gone_after_ms(interval_ms, intervals)


def shown_name(drainer: str) -> str:
    """A drainer as status shows it: its id's first characters, or `(single)`."""
    return drainer[:SHOWN_ID_CHARS] or SINGLE


def named_drainer(name: str, known: Collection[str]) -> str:
    """The id of the drainer `name` names among `known` (the ids of the state's rows): the
    id itself, the one id it is a prefix of, or '' for `(single)`. Anything else is a
    `ConfigError` (exit 2) naming the drainers there are."""
    wanted = "" if name in (SINGLE, "") else name.lower()
    if wanted in known:
        return wanted
    matches = sorted(d for d in known if d and wanted and d.startswith(wanted))
    if len(matches) == 1:
        return matches[0]
    listed = ", ".join(shown_name(d) for d in sorted(known)) or "none has ticked"
    if matches:
        raise ConfigError(f"drainer {name!r} is the start of {len(matches)} drainers' ids "
                          f"({', '.join(matches)}); give more of it")
    raise ConfigError(f"no drainer {name!r} on this state (its drainers: {listed})")
