"""Draining the lazy-edge queue: the second half of the REM tick (`core.drain.rem_tick`).

Every appended line takes effect exactly once, whatever its bytes and wherever a crash lands:

- **Identity by position.** A rotated queue (`.draining`) is a segment with a random id in
  a sidecar (`core.drain.stores.queue_files`); a line is (segment, byte offset). Each batch's
  transaction writes its nodes and edges *and* the segment's committed offset, so a
  restart resumes right after the last committed line: a replay is impossible, and a
  byte-identical line appended again is simply another line (another mention: it reinforces
  the edge again). No identity is kept per applied line.
- **Order of writes per batch**: (1) over-limit lines are streamed to side files while they
  are read; (2) dead letters are appended and fsynced; (3) re-queued lines are appended and
  fsynced; (4) one transaction: back-filled nodes, edges, the committed offset (with the
  dead-letter file's size), and the re-queue tokens issued and used up. A SIGKILL between any
  two steps leaves nothing applied twice and nothing lost:
  - before (4) nothing took effect, and the batch is read again from the committed offset;
  - dead letters written by a batch that never committed are found again by their `readAt`
    (they can only follow the dead-letter size the last commit recorded) and kept, not
    written twice, so one line never has two records;
  - a re-queued line carries a token (its lineId and attempt count) that is outstanding only
    once the commit recorded it, and is used up in the transaction that settles the line: a
    copy a crash left in the queue (the batch was re-read and re-queued it again, or applied
    it) is recognized and skipped.
- **No line can stop the queue.** Anything a line can carry is caught by the parser
  (`core.drain.rules.queue_lines`) and dead-lettered as malformed. For what nobody foresaw, a batch
  that fails twice with an error that is not an outage is split in halves until the line that
  fails alone is isolated and dead-lettered (`unprocessable`); the others are applied.
  Outages are told apart first: a SQLite error by its result code (busy, locked, I/O, full
  ...), a Chroma error by its kind (only a request refused for its data, 400/413 or refused by
  the client, can be the batch's fault) and by asking the store a harmless question (if that
  fails too, the store is down). An outage fails the tick, keeps `.draining` for the next one
  and spends no line's attempts. A line is isolated only after three tries alone, a moment
  apart, so a store that flaps cannot get a good line dead-lettered.
- **Bounded memory.** `.draining` is read in chunks, a batch is at most DRAIN_BATCH_LINES
  lines, DRAIN_BATCH_BYTES bytes and DRAIN_BATCH_PARSED_BYTES once parsed (a bound computed
  from the bytes before parsing), and a line over the limit is never held: it is streamed
  to `<queue>.dead/` and its dead letter names the file, its size and its SHA-256.
- **A drainer per host.** On a shared PostgreSQL state each host's drainer tags the
  segments it commits with its own id (`core.drain.stores.drainer_identity`) and forgets only its
  own older ones; a batch that loses to a concurrent write (deadlock, serialization failure)
  is tried again, and never counts against its lines.
- One drainer per queue at a time (a lock); a leftover `.draining` (a crash, a stop) is
  drained before the live queue is rotated, so a rotation never overwrites unread lines.

This package is the I/O around the pure decisions of `core.drain.rules.drain_plan`, one module per
concern:

- `queue_drain`: `drain_queue`, one tick's drain over the files: the drainer lock, the leftover
  `.draining` resumed at its committed offset, the live queue rotated, each read in bounded
  batches (DRAIN_BATCH_LINES ...) and removed; the dry run reads them in place;
- `batches`: one batch settled: resolved, written in the order above (`BatchSettler._write`),
  tried again on a write conflict, split on a failure that is not an outage, its failing line
  isolated and dead-lettered;
- `tick_state`: what a tick learns on the way and its batches share (the figures, the dead
  letters not yet behind a committed offset, the segment of the last commit).
"""
