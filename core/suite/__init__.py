"""What runs or shows the wings together, so that no wing and nothing of the base needs another
wing: one tick's path (`tick`), the schedule and its supervision (`scheduler`, `serve`,
`oneshot`), leadership (`leadership`), the metrics (`metrics`, `restored_metrics`), `status`
(`status`, `status_text`), the demo (`demo_dataset`, `demo_footprint`, `demo_folder`,
`demo_neo`, `demo_neo_folder`) and `kb-migrate` (`migrate`)."""
