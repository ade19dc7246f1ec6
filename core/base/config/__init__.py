"""The configuration, pure: the `[knowledgeBase]` keys (`config_schema`, the one table of every
key, default and reason), their resolution into `Settings` (`config`), the rendered docs
(`config_docs`), and the values a key names and must mean exactly (Chroma servers, `stateUrl`,
`neoRoot`, owner-only data folders, alert rules and channels)."""
