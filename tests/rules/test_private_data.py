"""Which data folders are judged at start, and the one line that refuses one others can reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.base.config.config import resolve_config
from core.base.config.private_data import FolderOwner, JudgedFolder, folder_problem, judged_folders

RUNNER = FolderOwner(0, 1000, "kb")
DATA = JudgedFolder("dataDir", Path("/var/lib/kb"))


def judged(tmp_path: Path, **table: str) -> list[tuple[str, Path]]:
    settings = resolve_config({"knowledgeBase": {"dataDir": "/srv/kb", **table}},
                              base_dir=tmp_path).settings
    return [(f.key, f.path) for f in judged_folders(settings)]


def test_the_data_folder_is_judged_and_what_lies_inside_it_is_covered_by_it(
    tmp_path: Path,
) -> None:
    assert judged(tmp_path) == [("dataDir", Path("/srv/kb"))]
    assert judged(tmp_path, chromaPath="/srv/kb/stores/chroma") == [("dataDir", Path("/srv/kb"))]


def test_an_embedded_store_outside_the_data_folder_is_judged_a_server_store_is_not(
    tmp_path: Path,
) -> None:
    assert judged(tmp_path, chromaPath="/srv/chroma") == [
        ("dataDir", Path("/srv/kb")), ("chromaPath", Path("/srv/chroma"))]
    assert judged(tmp_path, chromaPath="/srv/chroma", chromaUrl="http://127.0.0.1:8000") == [
        ("dataDir", Path("/srv/kb"))]


def test_another_programs_graph_file_and_queue_are_not_judged(tmp_path: Path) -> None:
    assert judged(tmp_path, graphDbPath="/home/neo/.neo-ai-data/memory-core/graph.sqlite",
                  lazyEdgesQueuePath="/home/neo/.neo-ai-data/lazy-edges.jsonl") == [
        ("dataDir", Path("/srv/kb"))]


@pytest.mark.parametrize("mode", [0o700, 0o500, 0o1700, 0o2700])
def test_a_folder_only_its_owner_can_reach_passes(mode: int) -> None:
    assert folder_problem(DATA, FolderOwner(mode, 1000), runner=RUNNER) is None


@pytest.mark.parametrize(("mode", "can"), [
    (0o755, "read"), (0o750, "read"), (0o701, "read"), (0o710, "read"),
    (0o770, "write to"), (0o703, "write to"), (0o777, "write to"), (0o2775, "write to"),
])
def test_any_right_for_the_group_or_others_is_refused_with_the_chmod_that_fixes_it(
    mode: int, can: str,
) -> None:
    assert folder_problem(DATA, FolderOwner(mode, 1000), runner=RUNNER) == (
        f"knowledgeBase.dataDir: /var/lib/kb has mode {mode:04o}, so other users can {can} "
        "it; the data folders are owner-only: chmod 700 /var/lib/kb")


def test_the_chmod_line_quotes_a_path_the_shell_would_split() -> None:
    folder = JudgedFolder("chromaPath", Path("/srv/my store"))
    problem = folder_problem(folder, FolderOwner(0o755, 1000), runner=RUNNER)
    assert problem is not None and problem.endswith("chmod 700 '/srv/my store'")


def test_a_folder_another_user_owns_is_refused_whatever_its_mode() -> None:
    problem = folder_problem(DATA, FolderOwner(0o700, 0, "root"), runner=RUNNER)
    assert problem == ("knowledgeBase.dataDir: /var/lib/kb belongs to root (uid 0), not to kb "
                       "(uid 1000) who runs this command, so another user can read and write "
                       "it: run the command as its owner")
    assert "uid 4242," in str(folder_problem(DATA, FolderOwner(0o700, 4242), runner=RUNNER))
