"""The scheduler: requests from every connection, decoded in batches on one thread.

Requests wait in arrival order; whenever the worker is free, the scheduler takes up to
``--max-running-requests`` of them (all that wait, by default) and decodes them as one batch
to the end. A request that arrives meanwhile waits for the next batch: the embedded engine
batches statically, where SGLang adds requests to a running batch, so under load its time
to first token includes the wait for the running batch. A ``/generate`` with a list of
prompts queues them together, so alone they decode as one batch, as before.

Each request has its own queue of events, which its HTTP handler reads: the output ids so
far after each step (streaming requests), then its ``Generation`` as soon as it is finished
(a sequence that finishes early in its batch does not wait for the others), or the error.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from perfgate.engines.embedded.batch import Batch, Generation, Request

logger = logging.getLogger("perfgate.engines.embedded")


class Worker(Protocol):
    def generate(
        self, requests: Sequence[Request], on_step: Callable[[Batch], None] | None = None
    ) -> list[Generation]: ...


@dataclass(frozen=True)
class Progress:
    """A streaming request's output ids so far (a new list each time)."""

    output_ids: list[int]


@dataclass(frozen=True)
class Finished:
    generation: Generation
    finished_at: float  # time.perf_counter()


@dataclass(frozen=True)
class Failed:
    error: BaseException


Event = Progress | Finished | Failed


@dataclass
class Pending:
    """One queued sequence and the events its handler waits for."""

    request: Request
    stream_interval: int | None = None  # None: not streamed; else tokens between chunks
    events: queue.SimpleQueue[Event] = field(default_factory=queue.SimpleQueue)
    sent: int = 0  # output ids streamed so far
    done: bool = False  # its Finished (or Failed) event is sent

    def wait(self) -> Finished:
        """Block until the sequence is finished; re-raise its batch's error."""
        while True:
            event = self.events.get()
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, Finished):
                return event


class Scheduler:
    """Decodes queued requests in batches on its own thread, one batch at a time."""

    def __init__(
        self,
        worker: Worker,
        max_running_requests: int | None,
        on_finished: Callable[[Generation], None],
        after_batch: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        self.worker = worker
        self.max_running_requests = max_running_requests
        self.on_finished = on_finished  # per sequence, before its handler hears of it
        self.after_batch = after_batch
        self.clock = clock
        self.waiting: deque[Pending] = deque()
        self.ready = threading.Condition()
        threading.Thread(target=self._loop, name="perfgate-scheduler", daemon=True).start()

    def submit(self, pendings: Sequence[Pending]) -> None:
        """Queue sequences, together, behind those already waiting."""
        with self.ready:
            self.waiting.extend(pendings)
            self.ready.notify()

    def _next_batch(self) -> list[Pending]:
        with self.ready:
            while not self.waiting:
                self.ready.wait()
            size = self.max_running_requests or len(self.waiting)
            return [self.waiting.popleft() for _ in range(min(size, len(self.waiting)))]

    def _loop(self) -> None:
        while True:
            self.run_batch(self._next_batch())

    def run_batch(self, pendings: Sequence[Pending]) -> None:
        """Decode one batch to the end; tell each handler how its sequence went."""
        try:
            generations = self.worker.generate(
                [p.request for p in pendings], on_step=lambda b: self._after_step(pendings, b)
            )
        except Exception as error:  # the handlers answer 500; the engine goes on
            logger.exception("a batch of %d requests failed", len(pendings))
            self.after_batch()
            for pending in pendings:
                if not pending.done:
                    pending.done = True
                    pending.events.put(Failed(error))
            return
        self.after_batch()  # before the last handlers hear: a profile ends with its batch
        for pending, generation in zip(pendings, generations, strict=True):
            self._finish(pending, generation)

    def _after_step(self, pendings: Sequence[Pending], batch: Batch) -> None:
        stream_progress(pendings, batch)
        if batch.done:
            return  # the batch's end finishes the rest
        for row, pending in enumerate(pendings):
            if not batch.remaining[row]:
                self._finish(pending, batch.generation(row))

    def _finish(self, pending: Pending, generation: Generation) -> None:
        if pending.done:
            return
        pending.done = True
        self.on_finished(generation)
        pending.events.put(Finished(generation, self.clock()))


def stream_progress(pendings: Sequence[Pending], batch: Batch) -> None:
    """After a step: send each streaming sequence its output so far, every interval tokens.

    A finished sequence is not sent here: its final chunk carries its last tokens.
    """
    for pending, outputs, remaining in zip(pendings, batch.outputs, batch.remaining, strict=True):
        interval = pending.stream_interval
        if interval is None or not remaining:
            continue
        if len(outputs) - pending.sent >= interval or (pending.sent == 0 and outputs):
            pending.sent = len(outputs)
            pending.events.put(Progress(list(outputs)))
