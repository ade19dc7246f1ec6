"""The configuration, pure: the `[knowledgeBase]` keys (`config_schema`, the one table of every
key, default, reason and group), `Settings` grouped by concern as the keys say
(`config_settings`: `settings.reconcile.orphan_version_gap`), their resolution (`config`), the
rendered docs (`config_docs`), and the values a key names and must mean exactly (Chroma servers,
`stateUrl`, `neoRoot`, owner-only data folders, alert rules and channels)."""
