"""Reports: read-only views for people (status, progress). They read through the stores and
never write."""
