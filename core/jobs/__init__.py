"""Jobs: the bodies of the daemons' ticks, each read (stores) -> decide (rules) -> write (stores).

A job receives a `TickContext` (settings, the stores, the stop flag) from the runtime and
returns its figures, a frozen dataclass.
"""
