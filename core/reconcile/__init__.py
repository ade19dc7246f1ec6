"""Reconciliation: find each tenant's knowledge-base chunks that its configuration no longer
vouches for, report them, and (opt-in, guarded, archived first) delete them.

The decisions are pure and live in `core.reconcile.rules` (`reconcile`: stale, actionable, the
guards; `scan_verdicts`: each row's verdict; `tenant_scan`: one tenant's tally of them;
`reconcile_groups`: which tenants one read can serve; `tombstone_bands` and `orphan_bands`:
the predicates a deletion runs by). This package is the I/O around them, one module per job:

- `run_pass`: the pass over every tenant (`reconcile_tick`, the daemon's tick function), group
  by group (`rules.reconcile_groups.plan_groups`);
- `one_group`: **the one read path**: a group read (by one query, or its part of one sweep),
  each tenant settled and guarded alone, the cleared ones handed to their deletion plans; a
  tenant read alone, and `explain`'s, is a group of one;
- `tenant_steps`: one read tenant's steps (settle, guard, count, tombstone, lapsed holds),
  each returning what it found, frozen (`rules.reconcile_outcome`: `ScanFigures`,
  `GuardVerdict`, `TombstoneFigures`, `Failure`); a step that raises is the tenant's failure;
- `scopes`: what a tenant's read, guards and plans share (`TenantScope`, `GroupRead`);
- `page_loop`: the one page loop every metadata read goes through;
- `deletion_plans`: which reasons to delete apply, built as `DeletionPlan`s;
- `deletion`: **the one deletion engine** (`run_bands`): archive, make durable, delete by the
  predicate; the only module outside the stores that deletes from the vector store;
- `recording`: telemetry rows and the spool;
- `explain_tenant`: `reconcile explain`, one tenant's pass run with nothing deleted;
- `archives`: the tombstone archives after their pass: listed, pruned, restored from.

Glossary (one word per idea):

- **pass**: one run of reconciliation over every tenant (the reconcile daemon's tick; the
  drain daemon's tick is a **REM tick**).
- **stale**: a chunk stamped with a superseded tenant-config version; **actionable** when the
  gap to the current version reaches the policy's; **orphan**: a chunk its repo's manifest no
  longer lists (actionable after the grace).
- **guard**: a check that holds a tenant's deletions for the pass (the delete cap, the stale
  fraction, a manifest mismatch, an invalid setting that fails closed).
- **policy**: what a pass does about stale chunks (gap, grace, whether it deletes), at two
  scopes: the pass's (`rules.reconcile.ReconcilePolicy`, from `[knowledgeBase]`), and a
  tenant's in force (`rules.tenant_policy.TenantPolicy`: its stored overrides resolved over
  the pass's).
- **group**: tenants read by one request: at one current version (`tenantId $in [...]`), or
  one tenant alone (a manifest, a generation, a policy or restore holds of its own: a group
  of one). The **sweep** is one read of the whole collection that serves every shared group at
  once when tenants are small: a way the one path reads, not a path of its own.
- **plan**: one reason to delete for one or more tenants (`DeletionPlan`): the `where` its
  bands share, each tenant's rule, and its bands. `explain`'s plan
  (`rules.explain_plan.TenantPlan`) is exactly the deletion plans' selection: the plan is the
  delete.
- **band**: the chunks of a plan whose `ingestedAt` falls in one range: one ids-only read,
  one archive write per tenant, one delete request.
- **legacy**: a config-stale actionable chunk whose `ingestedAt` is absent or an ISO string
  (older ingesters): its band names its ids, beside the staleness `where` (and, for strings,
  `ingestedAt $in` the strings read); deleted first, counted apart (`legacyTombstonedCount`).
- **held**: an actionable chunk that no band can take (an `ingestedAt` after the pass's read
  or of another type, or a legacy one that is only an orphan): reported, never deleted. A
  guard also *holds* a tenant, or a repo's orphans (the guard's hold): another idea than a
  held chunk or a restore hold.
- **restore hold**: a chunk a restore put back, not deleted while the tenant's evidence is
  the one of the restore or until `tenants release` (`restoreHeldCount`; rules/restore_holds).
- **first to go**: under the cap, ONE order across every reason: the oldest `ingestedAt`
  first (a legacy chunk at its ISO time, one without a date first of all), then the smaller id
  (`TenantTally.first_to_go`).
- **tombstone**: to delete a chunk after archiving it (`restore` puts it back).

How to add a deletion reason (e.g. a generation-identity orphan, retention) touches five
files: (1) its pure rule, a module of `core.reconcile.rules`: the `where` clauses every band of
it shares (always naming the tenant), the rule a fetched row must pass (`may_delete(metadata)`),
and how its bands are cut over the sorted `ingestedAt` of the chunks the scan found deletable
(`plan_bands`, or a cutter like `orphan_bands` that narrows each band); (2) `rules.tenant_scan`:
the tally keeps those chunks' `ingestedAt` (bounded by the cap) in `first_to_go`'s one
selection; (3) `deletion_plans.tombstone_tenant`: its `DeletionPlan`, handed to
`deletion.run_bands` with the tenant's shared progress (the cap counts every plan of the
tenant); (4) `rules.explain_plan`: its line in `explain`; (5) `rules.reconcile_outcome`: its
count in `ScanFigures` (filled by `TenantTally.figures`), the figures and telemetry. The engine
keeps every guarantee for it: archived first and flushed, decided by the store at delete time,
re-ingested chunks never deleted, the cap, one failure policy. Do not call the vector store's
delete anywhere else (tests/test_structure.py fails if you do).
"""
