"""What the entry points of `daemons/` share: the command machinery (`commands`: flags,
`--json`, exit codes), the daemon mode (`serving`), the summaries a run prints, and the parts of
the tenant and drain commands too long to sit in their entry point. Imports nothing itself."""
