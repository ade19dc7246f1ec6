"""The reconcile's stores: tombstone archives (`archives`: one file, the folder
as a whole, the shared copies), manifests and generations in the graph
(`tenant_manifests`, `generations`) and a repo's claimed paths (`claimed_paths`)."""
