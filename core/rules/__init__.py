"""Pure rules: every decision the daemons make, as functions of plain data.

Nothing here does I/O, reads the clock or imports a store client (an import-linter contract in
`.importlinter` holds every module to that). Time comes in as an argument; so do the rows a
decision is about. The formats of the files the daemons write (queue lines, dead letters,
tombstone archives) are written and read here, and only here.
"""
