"""Planted bugs of the consumer process and its offset stores (``spec/consumer_process.py``)."""

from __future__ import annotations

from rmqspec.spec.state import Client, Commit, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant, planted


@planted("no_persist_all_pruning", breaks=("R2.7",), refuted_by=("INV-6a",))
class NoPersistAllPruning(Variant):
    """The remote persistAll keeps the memory entries of queues it no longer owns."""

    def _without_unowned(self, mem: tuple[int | None, ...], unowned: list[int]) -> tuple[int | None, ...]:
        return mem


@planted("local_remove_offset_deletes_file", breaks=("R1.14",), refuted_by=("INV-6b",))
class LocalRemoveOffsetDeletesFile(Variant):
    """LocalFileOffsetStore.removeOffset (BROADCASTING) also deletes the queue's entry of offsets.json."""

    def _remove_offset(self, cl: Client, q: int) -> Client:
        cl = super()._remove_offset(cl, q)
        return cl if self.clustering else cl._replace(file=_put(cl.file, q, None))


@planted("bak_written_once", breaks=("R1.15",), refuted_by=("INV-6d",))
class BakWrittenOnce(Variant):
    """string2File copies the previous offsets.json to offsets.json.bak only while no .bak exists: the first write
    makes it, and every later write leaves it as it was, so .bak holds an ever older table instead of the previous
    file."""

    def _write_file(self, cl: Client, file: tuple[int | None, ...]) -> Client:
        if cl.file_bak is not None and any(v is not None for v in cl.file_bak):
            return cl._replace(file=file, file_main_unreadable=False)
        return super()._write_file(cl, file)


@planted("shutdown_skips_queued_commits", breaks=("R4.4", "R2.7"), refuted_by=("INV-25",))
class ShutdownSkipsQueuedCommits(Variant):
    """The shutdown's persistAll skips a queue that already has a commit on the connection, as if that commit were
    the last word: what was consumed since it was queued is never sent."""

    def _persist_all(self, s: State, i: int, cause: str) -> State:
        cl = s.clients[i]
        queued = {c.queue for c in cl.channel if isinstance(c, Commit)}
        if cause != "shutdown" or not self.clustering or not queued:
            return super()._persist_all(s, i, cause)
        hidden = cl._replace(mem=tuple(None if q in queued else v for q, v in enumerate(cl.mem)))
        t = super()._persist_all(s._replace(clients=_put(s.clients, i, hidden)), i, cause)
        after = t.clients[i]
        mem = tuple(cl.mem[q] if q in queued else v for q, v in enumerate(after.mem))
        return t._replace(clients=_put(t.clients, i, after._replace(mem=mem)))


@planted("persist_timer_stops", breaks=("R4.1",), refuted_by=("INV-27", "LIV-2"))
class PersistTimerStops(Variant):
    """persistAllConsumerOffset runs once and is never rescheduled: INV-27 sees the deadline go, LIV-2 the offsets
    never persisted."""

    def _next_persist_run(self, due: int) -> int | None:
        return None
