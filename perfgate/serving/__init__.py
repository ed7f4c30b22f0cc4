"""Serving under load: requests arriving at a rate, streamed, timed one token at a time.

`load` describes the load a scenario asks for (``[scenarios.NAME.serving]``), `generator`
sends it (asyncio + httpx, SGLang's streaming ``/generate``) and times each request,
`figures` turns the timings into metrics, and `sglang_bench` runs SGLang's own
``sglang.benchmark.serving`` against the same server as a cross-check.
"""
