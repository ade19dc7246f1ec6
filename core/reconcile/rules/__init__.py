"""The reconcile's pure rules: staleness and the guards (`reconcile`), each row's verdict
(`scan_verdicts`), a tenant's tally (`tenant_scan`), groups (`reconcile_groups`), the
deletion predicates (`tombstone_bands`, `orphan_bands`), manifests, generation orphans
(`generations`), retention, tenant policy, restore holds, the tombstone archives
(`archives`) and the explain plan."""
