"""What runs or shows the wings together, so that no wing and nothing of the base needs another
wing: one tick's path (`tick`), the schedule and its supervision (`scheduler`, `serve`,
`oneshot`), leadership (`leadership`), the metrics (`metrics`, `restored_metrics`), `status`
(`status`, `status_text`), the demo (`demo/`) and `kb-migrate` (`migrate`)."""
