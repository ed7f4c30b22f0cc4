"""What the probe's CUDA marks cost, and why it queries events on the recording thread only.

    python benchmarks/probe_cuda_marks.py        # on a machine with a CUDA GPU and torch

1. A CUDA graph captured (global mode, torch's default, as SGLang captures) while another
   thread queries a CUDA event: does the capture survive? (The probe's writer thread must not
   query events while SGLang captures its graphs.)
2. A timing event recorded inside a capture.
3. CPU cost per call of what the probe does per mark: create + record a timing event, record
   only, `is_current_stream_capturing()`, query a finished event.

Not a test: figures depend on the machine.
"""

from __future__ import annotations

import threading
import time

import torch

N = 20_000


def timing_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def capture_while_querying(x: torch.Tensor, query_from_another_thread: bool) -> str:
    start, end = timing_event(), timing_event()
    start.record()
    x @ x
    end.record()
    stop, errors = threading.Event(), []

    def query() -> None:
        while not stop.is_set():
            try:
                end.query()  # type: ignore[no-untyped-call]
            except Exception as error:
                errors.append(repr(error)[:120])
                return

    poller = threading.Thread(target=query)
    if query_from_another_thread:
        poller.start()
    graph, outcome = torch.cuda.CUDAGraph(), "capture ok"
    try:
        with torch.cuda.graph(graph):
            for _ in range(300):
                x @ x
        graph.replay()
        torch.cuda.synchronize()
    except Exception as error:
        outcome = f"capture failed: {repr(error)[:160]}"
    stop.set()
    if query_from_another_thread:
        poller.join()
    torch.cuda.synchronize()
    return f"{outcome}; querying thread: {errors[0] if errors else 'no error'}"


def per_call_us(action: object) -> float:
    started = time.perf_counter()
    for _ in range(N):
        action()  # type: ignore[operator]
    return (time.perf_counter() - started) / N * 1e6


def main() -> None:
    torch.cuda.init()  # type: ignore[no-untyped-call]
    x = torch.randn(4096, 4096, device="cuda")
    print(torch.__version__, torch.cuda.get_device_name())
    print("capture, no other thread:", capture_while_querying(x, False))
    print("capture, another thread querying:", capture_while_querying(x, True))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capturing = torch.cuda.is_current_stream_capturing()
        timing_event().record()
        x @ x
    print(f"inside a capture: is_current_stream_capturing()={capturing}, an event recorded")
    torch.cuda.synchronize()

    def create_and_record() -> None:
        timing_event().record()

    events = [timing_event() for _ in range(N)]
    it = iter(events)
    print(f"create + record a timing event: {per_call_us(create_and_record):.2f} us")
    print(f"record an existing event: {per_call_us(lambda: next(it).record()):.2f} us")
    capturing_us = per_call_us(torch.cuda.is_current_stream_capturing)
    print(f"is_current_stream_capturing(): {capturing_us:.2f} us")
    torch.cuda.synchronize()
    it = iter(events)
    query_us = per_call_us(lambda: next(it).query())  # type: ignore[no-untyped-call]
    print(f"query a finished event: {query_us:.2f} us")


if __name__ == "__main__":
    main()
