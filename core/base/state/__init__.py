"""The state: the store seam every backend offers (`graph_db`), opened by `state`, kept open and
reopened by `reopening_graph`; the backends (`sqlite`, the embedded default; `postgres`,
shared by hosts; `neo`, a neo.mjs deployment's own graph file); the graph's statements
(`graph`), the daemons' bookkeeping (`daemon_state`), tenant configs (`tenants`) and the
telemetry rows (`telemetry`, `telemetry_spool`)."""
