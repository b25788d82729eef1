"""Deterministic time and executors for the reference implementation: no threads, no wall clock.

RocketMQ runs its periodic work on ``ScheduledExecutorService`` threads, its pull requests through a
``LinkedBlockingQueue`` plus delayed hand-offs, and its listeners on a thread pool. Here each of those
is a passive data structure that a driver steps explicitly, so a run is a pure function of the
actions it was given:

- :class:`VirtualClock` stands for ``System.currentTimeMillis()``; only the driver moves it.
- :class:`ScheduledExecutorService` keeps named tasks with their next due time. A task runs only when
  the driver calls :meth:`ScheduledExecutorService.run_due`, and only if it is due; a fixed-rate task
  is then re-armed at ``due + period`` (R4.1, R3.6 timers).
- :class:`DelayQueue` holds work that becomes runnable at a given time (``executePullRequestLater``,
  ``submitConsumeRequestLater``); it is taken from in any order once ready.
- :class:`IdSequence` mints object identities (ProcessQueue, ConsumeRequest) that outlive a process
  crash, so a refinement check can name objects the same way the model does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class SchedulerError(RuntimeError):
    """A task or item was asked to run before it was due, or does not exist."""


class VirtualClock:
    """Logical milliseconds; ``now()`` replaces ``System.currentTimeMillis()``."""

    def __init__(self, start: int = 0) -> None:
        self._now = start

    def now(self) -> int:
        return self._now

    def advance_to(self, when: int) -> None:
        """Move time forward to ``when``; time never goes back."""
        if when < self._now:
            raise SchedulerError(f"the clock cannot go back from {self._now} to {when}")
        self._now = when


@dataclass(eq=False)
class ScheduledFuture:
    """A task of a :class:`ScheduledExecutorService`: one-shot when ``period`` is None."""

    name: str
    task: Callable[[], None]
    due: int
    period: int | None = None
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class ScheduledExecutorService:
    """A ``ScheduledExecutorService`` whose tasks run only when the driver fires them."""

    def __init__(self, clock: VirtualClock, name: str) -> None:
        self.clock = clock
        self.name = name
        self._tasks: list[ScheduledFuture] = []
        self._shutdown = False

    def schedule(self, name: str, task: Callable[[], None], delay: int) -> ScheduledFuture:
        """``schedule(task, delay, MILLISECONDS)``: run once, ``delay`` ms from now."""
        return self._add(ScheduledFuture(name, task, self.clock.now() + delay))

    def schedule_at_fixed_rate(
        self, name: str, task: Callable[[], None], initial_delay: int, period: int
    ) -> ScheduledFuture:
        """``scheduleAtFixedRate``: first after ``initial_delay`` ms, then every ``period`` ms."""
        return self._add(ScheduledFuture(name, task, self.clock.now() + initial_delay, period))

    def _add(self, future: ScheduledFuture) -> ScheduledFuture:
        if self._shutdown:
            raise SchedulerError(f"{self.name} is shut down; cannot schedule {future.name}")
        if any(f.name == future.name for f in self._live()):
            raise SchedulerError(f"{self.name} already has a task named {future.name}")
        self._tasks.append(future)
        return future

    def _live(self) -> Iterator[ScheduledFuture]:
        return (f for f in self._tasks if not f.cancelled)

    def get(self, name: str) -> ScheduledFuture | None:
        return next((f for f in self._live() if f.name == name), None)

    def due_time(self, name: str) -> int | None:
        """When the task ``name`` runs next; None if there is no such task (or it was cancelled)."""
        future = self.get(name)
        return None if future is None else future.due

    def tasks(self) -> list[ScheduledFuture]:
        """Every live task, in scheduling order."""
        return list(self._live())

    def due_times(self) -> list[int]:
        """Due times of every live task."""
        return [f.due for f in self._live()]

    def run_due(self, name: str) -> None:
        """Run the task ``name`` now; it must be due. A fixed-rate task is re-armed first."""
        future = self.get(name)
        if future is None:
            raise SchedulerError(f"{self.name} has no task named {name}")
        if future.due > self.clock.now():
            raise SchedulerError(f"{self.name}: {name} is due at {future.due}, it is only {self.clock.now()}")
        if future.period is None:
            future.cancelled = True
        else:
            future.due += future.period  # fixed rate: the next run is counted from the planned one
        self._tasks = [f for f in self._tasks if not f.cancelled]
        future.task()

    def shutdown(self) -> None:
        """``shutdownNow``: every pending task is dropped."""
        for future in self._tasks:
            future.cancelled = True
        self._tasks = []
        self._shutdown = True

    @property
    def is_shutdown(self) -> bool:
        return self._shutdown


@dataclass
class DelayQueue(Generic[T]):
    """Items that become runnable at a time, kept in the order they were put (like a work queue
    fed partly through ``ScheduledExecutorService.schedule``)."""

    _items: list[tuple[T, int]] = field(default_factory=list)

    def put(self, item: T, ready_at: int) -> None:
        self._items.append((item, ready_at))

    def items(self) -> list[tuple[T, int]]:
        return list(self._items)

    def ready_at(self, item: T) -> int | None:
        return next((when for it, when in self._items if it is item), None)

    def take(self, item: T, now: int) -> None:
        """Remove ``item``, which must be in the queue and ready at ``now``."""
        for k, (it, when) in enumerate(self._items):
            if it is item:
                if when > now:
                    raise SchedulerError(f"{item!r} is ready only at {when}, it is {now}")
                del self._items[k]
                return
        raise SchedulerError(f"{item!r} is not queued")

    def remove_if(self, predicate: Callable[[T], bool]) -> None:
        self._items = [(it, when) for it, when in self._items if not predicate(it)]

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class IdSequence:
    """Mints object identities in order; one per consumer index, surviving process crashes."""

    def __init__(self, start: int = 0) -> None:
        self._next = start

    def next_id(self) -> int:
        value = self._next
        self._next += 1
        return value

    @property
    def value(self) -> int:
        """The next id that will be minted."""
        return self._next
