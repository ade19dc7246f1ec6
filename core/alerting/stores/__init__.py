"""The alerting's stores: delivery (`alert_delivery`), cooldowns and fired alerts
(`alert_records`), and the health view's rollup read (`health`)."""
