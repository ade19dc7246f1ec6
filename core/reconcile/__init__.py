"""Reconciliation: find each tenant's knowledge-base chunks that its configuration no longer
vouches for, report them, and (opt-in, guarded, archived first) delete them.

The decisions are pure and live in `core.reconcile.rules` (`reconcile`: stale, actionable, the
guards;
`scan_verdicts`: each row's verdict; `tenant_scan`: one tenant's tally of them;
`reconcile_groups`: which tenants one read can serve; `tombstone_bands` and `orphan_bands`:
the predicates a deletion runs by). This package is the I/O around them,
one module per job:

- `run_pass`: the pass over every tenant (`reconcile_tick`, the daemon's tick function);
- `one_tenant`: one tenant scanned, settled, guarded and handed to its deletion plans;
- `group_reads`: tenants read by groups (one read serves many), each then guarded alone;
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
- **group**: tenants at one current version read by one request (`tenantId $in [...]`); the
  **sweep** is the read of the whole collection that serves every group at once when tenants
  are small. A tenant read alone is a group of one in the deletion engine.
- **plan**: one reason to delete for one or more tenants (`DeletionPlan`): the `where` its
  bands share, each tenant's rule, and its bands.
- **band**: the chunks of a plan whose `ingestedAt` falls in one range: one ids-only read,
  one archive write per tenant, one delete request.
- **legacy**: a config-stale actionable chunk whose `ingestedAt` is absent or an ISO string
  (older ingesters): its band names its ids, beside the staleness `where` (and, for strings,
  `ingestedAt $in` the strings read); deleted first, counted apart (`legacyTombstonedCount`).
- **held**: an actionable chunk that no band can take (an `ingestedAt` after the pass's read
  or of another type, or a legacy one that is only an orphan): reported, never deleted.
- **restore hold**: a chunk a restore put back, not deleted while the tenant's evidence is
  the one of the restore or until `tenants release` (`restoreHeldCount`; rules/restore_holds).
- **first to go**: under the cap, config-stale chunks (legacy ones first), then the oldest
  `ingestedAt` of every other reason together, then the smaller id (`first_to_go`).
- **tombstone**: to delete a chunk after archiving it (`restore` puts it back).

How to add a deletion reason (e.g. a generation-identity orphan, retention): write its pure
parts in `core.reconcile.rules`: the `where` clauses every band of it shares (always naming the
tenant), the rule a fetched row must pass (`may_delete(metadata)`), and how its bands are cut over
the sorted `ingestedAt` of the chunks the scan found deletable (`plan_bands`, or a cutter like
`orphan_bands` that narrows each band). Make the scan keep those chunks' `ingestedAt`
(bounded by the cap), then, in `deletion_plans.tombstone_tenant`, build a `DeletionPlan` of
them and hand it to `deletion.run_bands` with the tenant's shared progress (the cap counts
every plan of the tenant). The engine keeps every guarantee for it: archived first and
flushed, decided by the store at delete time, re-ingested chunks never deleted, the cap, one
failure policy. Do not call the vector store's delete anywhere else (tests/test_structure.py
fails if you do).
"""
