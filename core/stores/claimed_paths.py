"""A repo's claimed paths, read for `tenants set-manifest`: from a paths file, or with git at a
commit (the daemon-side repo walk that catches a force-push; the original only had what each
push's payload said).

`git ls-tree -r -z --full-tree --name-only <commit>` lists every path of the commit's
tree; `-z` gives the names as they are (no quoting of unusual bytes), so a path that is not
UTF-8 is found and refused rather than stored in git's quoted form; `--full-tree` lists the
whole tree even when DIR is a subfolder of a work tree (git would list paths below it,
relative to it). Works on a work tree and on a bare
repository (`git -C DIR`); the work tree's uncommitted files are never read.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: git's own answer time is small; a repo on a hung network mount must not hang the command.
GIT_TIMEOUT_S = 120


class ClaimedPathsError(ValueError):
    """The paths could not be read (no repository, no such ref, a path that is not UTF-8):
    one line saying which."""


def _last_line(stderr: bytes, fallback: str) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else fallback


@dataclass(frozen=True, slots=True)
class PathsAtCommit:
    """The paths of a commit's tree, and the commit id they were read at."""

    revision: str
    paths: list[str]


def _git(directory: Path, *args: str, failure: str) -> bytes:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                              env=env, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClaimedPathsError(f"git could not run in {directory}: {exc}") from exc
    if done.returncode != 0:
        raise ClaimedPathsError(f"{directory}: {_last_line(done.stderr, failure)}")
    return done.stdout


def paths_at(directory: Path, ref: str) -> PathsAtCommit:
    """Every path of `ref`'s tree in the repository at `directory` (a work tree or a bare
    repository). Raises ClaimedPathsError with one line."""
    if not directory.is_dir():
        raise ClaimedPathsError(f"{directory}: not a directory")
    if ref.startswith("-"):
        raise ClaimedPathsError(f"{ref!r}: not a ref")
    revision = _git(directory, "rev-parse", "--verify", "--quiet", "--end-of-options",
                    f"{ref}^{{commit}}", failure=f"no commit named {ref!r}"
                    ).decode("ascii", "replace").strip()
    listing = _git(directory, "ls-tree", "-r", "-z", "--full-tree", "--name-only", revision,
                   failure=f"git ls-tree {revision} failed")
    paths: list[str] = []
    for raw in listing.split(b"\0"):
        if not raw:
            continue
        try:
            paths.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ClaimedPathsError(
                f"{directory}: path {raw!r} at {ref} is not valid UTF-8") from exc
    return PathsAtCommit(revision, paths)


def paths_from_bytes(data: bytes, *, source: str) -> list[str]:
    """One path per line (LF or CRLF) of a paths file; raises ClaimedPathsError (a ValueError)
    naming the line of the first path that is not valid UTF-8 or holds a NUL."""
    paths: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.removesuffix(b"\r")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ClaimedPathsError(f"{source}:{number}: path is not valid UTF-8 "
                               f"(byte {exc.start + 1})") from exc
        if "\0" in text:
            raise ClaimedPathsError(f"{source}:{number}: path holds a NUL byte")
        paths.append(text)
    return paths
