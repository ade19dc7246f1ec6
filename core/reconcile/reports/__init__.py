"""The reconcile's views for people: `explain`, `tenants show` and `archives`."""
