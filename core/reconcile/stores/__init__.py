"""The reconcile's stores: tombstone archives (`archives`; the folder as a whole,
`archive_files`; the shared copies, `shared_archives`), manifests and generations in the graph
(`tenant_manifests`, `generations`) and a repo's claimed paths (`claimed_paths`)."""
