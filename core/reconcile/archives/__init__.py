"""The tombstone archives, after the pass that wrote them (the deletion engine writes each one
before its delete, `core.reconcile.deletion`): `listing` (`reconcile archives`, every archive and
what it still holds), `pruning` (the retention pass's removal of archives older than
`archiveMaxAgeMs`) and `restore` (`reconcile restore`, preserve-live). Their pure rules are
`core.reconcile.rules.archives`, their files and shared copies `core.reconcile.stores.archives`.
"""
