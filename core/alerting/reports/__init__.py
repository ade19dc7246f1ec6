"""The alerting's views for people: `kb-status --health`."""
