"""Alerting: the alerting pass (`alerting_pass`: telemetry rollup in, alerts out, cooldowns
kept), its pure evaluation and wording (`rules`), delivery and records (`stores`), and the
health view (`reports.health`). The alert rules and channels are configuration
(`core.base.config.alert_rules`, `alert_channels`)."""
