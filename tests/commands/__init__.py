"""Tests of the commands (`daemons/`) as an operator types them: flags, exit codes, `--json`."""
