"""A producer process for the concurrency test: appends edge lines to the queue, every seventh
one twice, byte for byte (two mentions of one edge).

    python tests/reliability/producer.py MODE CONFIG ID COUNT

MODE `enqueue` uses the library producer (lock protocol), with every tenth chunk through the
`python -m daemons.enqueue` command; MODE `bare` opens, appends one line and closes, with no
lock, as `appendFileSync` or a shell `>>` would. Prints the relationships it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.base.runtime.config_file import load_config  # noqa: E402
from core.drain.stores.queue_files import enqueue_edges  # noqa: E402

CHUNK = 50


def main(mode: str, config: str, producer: str, count: int) -> None:
    queue = load_config(config, environ={}).settings.drain.lazy_edges_queue_path
    queue.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for start in range(0, count, CHUNK):
        lines = []
        for i in range(start, min(start + CHUNK, count)):
            rel = f"P{producer}-{i}"
            line = json.dumps({"source": f"CONCEPT:c{i % 10}", "target":
                               f"CONCEPT:c{(i + 1) % 10}", "relationship": rel}).encode()
            copies = 2 if i % 7 == 0 else 1
            written.extend([rel] * copies)
            lines.extend([line] * copies)
        if mode == "bare":
            for line in lines:
                with queue.open("ab") as f:
                    f.write(line + b"\n")
        elif (start // CHUNK) % 10 == 9:
            subprocess.run([sys.executable, "-m", "daemons.enqueue", "--config", config],
                           input=b"\n".join(lines) + b"\n", cwd=ROOT, check=True,
                           capture_output=True, env=os.environ)
        else:
            assert enqueue_edges(queue, lines) == []
        time.sleep(0.001)
    print("\n".join(written))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
