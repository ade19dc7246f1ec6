"""The PostgreSQL backend of the store seam (`stateUrl`): the state shared by several hosts.

`connection` holds the asyncpg connection and its transactions, `schema` the versioned DDL,
`statements` the SQL text of every table-group operation.
"""

from core.base.state.postgres.connection import PostgresGraph, PostgresTransaction

__all__ = ["PostgresGraph", "PostgresTransaction"]
