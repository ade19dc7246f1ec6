"""The alerting's pure rules: evaluation over a rollup (`alert_evaluation`), wording
(`alert_text`) and the health view's figures (`health`)."""
