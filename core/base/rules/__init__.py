"""Pure rules every wing shares, as functions of plain data: ids and graph nodes (`ids`,
`nodes`), the original's graph rules (`neo_graph`, `graph_schema`), errors and their exit
codes, secrets and their scrubber, telemetry rows, numbers, times, rows, tenants, and the
state backends' own (`state`: a verified copy, writes in rounds).

Nothing in a `rules` package does I/O, reads the clock or imports a store client (an
import-linter contract in `.importlinter` holds every module to that). Time comes in as an
argument; so do the rows a decision is about.
"""
