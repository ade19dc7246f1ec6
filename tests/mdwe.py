"""`python tests/mdwe.py PROGRAM ARGS...`: run a program with writable-and-executable memory
refused, as systemd's `MemoryDenyWriteExecute=yes` does, so a test can show the daemons work
under the units' hardening without systemd. Linux >= 6.3 (`PR_SET_MDWE`, kept across exec);
exits 77 where the kernel does not have it, so the caller can skip."""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1
EXIT_UNSUPPORTED = 77


def main() -> None:
    """Refuse W+X mappings for this process and its children, then exec the program."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        sys.stderr.write(f"PR_SET_MDWE unsupported: errno {ctypes.get_errno()}\n")
        raise SystemExit(EXIT_UNSUPPORTED)
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
