"""The reconcile's views for people: `explain` and `tenants show`."""
