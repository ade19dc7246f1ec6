"""A repo's claimed paths, read for `tenants set-manifest`: from a paths file, or with git at a
commit (the daemon-side repo walk that catches a force-push; the original only had what each
push's payload said).

`git ls-tree -r -z --full-tree --name-only <commit>` lists every path of the commit's
tree; `-z` gives the names as they are (no quoting of unusual bytes), so a path that is not
UTF-8 is found and refused rather than stored in git's quoted form; `--full-tree` lists the
whole tree whatever git's idea of the current folder. DIR must be the top of a work tree or
a bare repository (`require_repository_top`); the work tree's uncommitted files are never
read.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from core.reconcile.rules.manifests import visible

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


def _same_folder(a: str | Path, b: Path) -> bool:
    return Path(a).resolve() == b.resolve()


def _shown(path: str | Path) -> str:
    return visible(str(path))


def require_repository_top(directory: Path) -> None:
    """Raise ClaimedPathsError (one line) unless `directory` is the top of a git work tree or
    a bare repository (symlinks resolved on both sides).

    git's discovery walks up from any folder to the repository around it, so a folder that is
    merely inside another work tree (a vendored copy, a checkout that lost its `.git`) would
    silently name the *enclosing* repository, whose paths match none of the tenant's chunks:
    every chunk of the repo would become an orphan. The operator meant that folder, so a
    folder that is not a repository's top is refused, naming the enclosing top when there is
    one."""
    if not directory.is_dir():
        raise ClaimedPathsError(f"{directory}: not a directory")
    found = _git(directory, "rev-parse", "--is-bare-repository", "--is-inside-git-dir",
                 "--absolute-git-dir", failure="not a git repository"
                 ).decode("utf-8", "replace").splitlines()
    if len(found) != 3:
        raise ClaimedPathsError(f"{directory}: git rev-parse did not name a repository")
    bare, in_git_dir, git_dir = found[0] == "true", found[1] == "true", found[2]
    if bare:
        if not _same_folder(git_dir, directory):
            raise ClaimedPathsError(f"{_shown(directory)} is inside the bare repository at "
                                    f"{_shown(git_dir)}; pass {_shown(git_dir)}")
        return
    if in_git_dir:
        work_tree = Path(git_dir).parent
        raise ClaimedPathsError(f"{_shown(directory)} is inside the git directory of the work "
                                f"tree at {_shown(work_tree)}; pass {_shown(work_tree)}")
    top = _git(directory, "rev-parse", "--show-toplevel", failure="no work tree"
               ).decode("utf-8", "replace").rstrip("\n")
    if not _same_folder(top, directory):
        raise ClaimedPathsError(f"{_shown(directory)} is inside the work tree at {_shown(top)}; "
                                f"pass {_shown(top)}, or make {_shown(directory)} a repository "
                                "of its own")


def paths_at(directory: Path, ref: str) -> PathsAtCommit:
    """Every path of `ref`'s tree in the repository at `directory`, which must be the top of a
    work tree or a bare repository (`require_repository_top`). The paths are as git lists
    them; the manifest rules check them (`core.reconcile.rules.manifests.normalize_manifest_paths`).
    Raises ClaimedPathsError with one line."""
    if ref.startswith("-"):
        raise ClaimedPathsError(f"{ref!r}: not a ref")
    require_repository_top(directory)
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
    """One line per path (LF or CRLF) of a paths file, decoded; raises ClaimedPathsError (a
    ValueError) naming the first line that is not valid UTF-8. What the lines may hold is
    the manifest rules' (`core.reconcile.rules.manifests.normalize_manifest_paths`)."""
    paths: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.removesuffix(b"\r")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ClaimedPathsError(f"{source}:{number}: path is not valid UTF-8 "
                                    f"(byte {exc.start + 1})") from exc
        paths.append(text)
    return paths
