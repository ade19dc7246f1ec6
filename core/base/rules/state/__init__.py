"""The state backends' pure rules: what "copied exactly" means when `kb-migrate` copies the
state into PostgreSQL (`verified_copy`), and how a batch of keyed writes is split into rounds
that PostgreSQL's set-based statements can apply (`write_rounds`)."""
