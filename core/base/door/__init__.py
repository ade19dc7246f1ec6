"""The store door: how a command beside a running daemon reaches the embedded store the daemon
holds (`chroma_door`), through an owner-only Unix socket whose peer is checked both ways
(`door_socket`). The daemon's side is `core.base.runtime.store_door`."""
