"""The embedded engine's HTTP server, launched and spoken to like ``sglang.launch_server``.

    python -m perfgate.engines.embedded.server --model-path perfgate/llama-tiny \\
        --speculative-algorithm EAGLE3 --speculative-draft-model-path perfgate/eagle3-llama-tiny \\
        --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4

Endpoints, as in SGLang 0.5.23: ``POST /generate`` (``text`` or ``input_ids``, single or a
list that decodes as one batch of up to ``--max-running-requests``; SGLang's sampling
parameters and defaults; ``return_logprob`` and ``top_logprobs_num`` for output tokens;
``"stream": true`` answers ``data: {...}`` lines, the text and output ids so far, then
``data: [DONE]``), ``GET /health``, ``GET /health_generate`` (after a one-token generation),
``GET /server_info`` (alias ``/get_server_info``: the args with ``tokenizer_path``, the engine,
the model identities and ``internal_states[0]``: ``effective_max_running_requests_per_dp``,
``last_gen_throughput``, ``avg_spec_accept_length``), ``GET /model_info`` (alias
``/get_model_info``), ``GET /v1/models``, ``POST /flush_cache`` (resets that average), and
``POST /start_profile`` and ``POST /stop_profile`` (torch.profiler over a few decode cycles,
with SGLang's request body: see ``profiling.py``). Requests from all connections are decoded
by one scheduler (``scheduler.py``).

Models load before the port opens, so ``/health`` answers only once the server can generate.
SIGTERM or SIGINT, or the death of the parent process, stops it with exit code 0.

With ``--tp-size N`` this process is rank 0 of N: it starts the other ranks, each holding its
shard of the models (``parallel.py``, ``ranks.py``), and they end with it.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from perfgate.engines.embedded.api import (
    GenerateRequest,
    StreamText,
    parse_generate,
    render_chunk,
)
from perfgate.engines.embedded.args import check_args, parse_args
from perfgate.engines.embedded.batch import RequestError
from perfgate.engines.embedded.engine import App, build_app
from perfgate.engines.embedded.profiling import parse_profile_request
from perfgate.engines.embedded.ranks import server_stopping
from perfgate.engines.embedded.scheduler import Failed, Finished, Progress
from perfgate.errors import ExitCode, InfrastructureError, PerfgateError

READY_LINE = "The server is fired up and ready to roll!"  # SGLang's words; launchers wait on it
FLUSHED = "Cache flushed.\n"

logger = logging.getLogger("perfgate.engines.embedded")

DONE = b"data: [DONE]\n\n"  # the last line of an SGLang stream


@dataclass(frozen=True)
class Stream:
    """A payload sent as server-sent events, one ``data:`` line per item, as it comes."""

    chunks: Iterator[dict[str, Any]]


# A route takes the app, the request body and its arrival time; it returns (status, payload),
# where a str payload is sent as text, None as an empty body, a Stream as server-sent events
# and anything else as JSON.
Route = Callable[[App, bytes, float], tuple[int, Any]]


def _generate(app: App, body: bytes, received: float) -> tuple[int, Any]:
    try:
        request = parse_generate(json.loads(body or b"null"))
    except json.JSONDecodeError as error:
        raise RequestError(f"the body is not JSON ({error})") from error
    if request.stream:
        return 200, Stream(_stream_chunks(app, request, received))
    responses = app.engine.generate(request, received)
    return 200, responses if request.is_batch else responses[0]


def _stream_chunks(app: App, request: GenerateRequest, received: float) -> Iterator[dict[str, Any]]:
    """SGLang's chunks of one streamed request: the output so far, then the finished response.

    The request is queued before the first chunk is asked for, so a refused one is a 400.
    """
    (pending,) = app.engine.submit(request)
    rid, prompt_tokens = request.rids[0], len(pending.request.prompt_ids)

    def chunks() -> Iterator[dict[str, Any]]:
        text = StreamText()
        sent = 0
        while True:
            event = pending.events.get()
            if isinstance(event, Failed):
                yield _error(f"internal error: {event.error!r}", stream=True)
                return
            if isinstance(event, Finished):
                yield app.engine.render(pending, rid, received, event)
                return
            assert isinstance(event, Progress)
            text.add(event.output_ids[sent:])
            sent = len(event.output_ids)
            yield render_chunk(rid, prompt_tokens, event.output_ids, text.text)

    return chunks()


def _model_info(app: App, body: bytes, received: float) -> tuple[int, Any]:
    return 200, app.model_info()


def _models(app: App, body: bytes, received: float) -> tuple[int, Any]:
    return 200, app.models()


def _health(app: App, body: bytes, received: float) -> tuple[int, Any]:
    return 200, None


def _health_generate(app: App, body: bytes, received: float) -> tuple[int, Any]:
    app.engine.generate(GenerateRequest([[0]], [1], ["health"], is_batch=False), received)
    return 200, None


def _server_info(app: App, body: bytes, received: float) -> tuple[int, Any]:
    return 200, app.server_info()


def _flush_cache(app: App, body: bytes, received: float) -> tuple[int, Any]:
    app.engine.flush()
    return 200, FLUSHED


def _start_profile(app: App, body: bytes, received: float) -> tuple[int, Any]:
    try:
        request = parse_profile_request(json.loads(body) if body else None)
    except json.JSONDecodeError as error:
        raise RequestError(f"the body is not JSON ({error})") from error
    return 200, app.engine.profiler.start(request)


def _stop_profile(app: App, body: bytes, received: float) -> tuple[int, Any]:
    return 200, app.engine.profiler.stop()


ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/generate"): _generate,
    ("GET", "/health"): _health,
    ("GET", "/health_generate"): _health_generate,
    ("GET", "/server_info"): _server_info,
    ("GET", "/get_server_info"): _server_info,  # the name before SGLang v0.5.6
    ("GET", "/model_info"): _model_info,
    ("GET", "/get_model_info"): _model_info,  # SGLang 0.5.23 still answers the old name
    ("GET", "/v1/models"): _models,
    ("GET", "/flush_cache"): _flush_cache,
    ("POST", "/flush_cache"): _flush_cache,
    ("GET", "/start_profile"): _start_profile,
    ("POST", "/start_profile"): _start_profile,
    ("GET", "/stop_profile"): _stop_profile,
    ("POST", "/stop_profile"): _stop_profile,
}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], app: App) -> None:
        super().__init__(address, Handler)
        self.app = app


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every response carries Content-Length
    # TCP_NODELAY. A response leaves in two writes, its headers then its body; with Nagle's
    # algorithm the body waited for the client's ACK of the headers, which Linux delays up to
    # 40 ms: 40 ms more in every answer with a body, a timed repeat's too (the 8 default
    # prompts, one token each, on a CPU: 56 ms a request, 11 ms without). uvicorn, which
    # serves SGLang, sets it too.
    disable_nagle_algorithm = True
    server_version = "perfgate-embedded"
    server: Server

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("POST")  # SGLang takes PUT like POST

    def _dispatch(self, method: str) -> None:
        received = time.perf_counter()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlsplit(self.path).path
        route = ROUTES.get((method, path))
        if route is None:
            self._send(404, _error(f"no route for {method} {path}"))
            return
        try:
            status, payload = route(self.server.app, body, received)
        except RequestError as error:
            status, payload = 400, _error(str(error))
        except Exception as error:
            logger.exception("%s %s failed", method, path)
            status, payload = 500, _error(f"internal error: {error!r}")
        self._send(status, payload)

    def _send(self, status: int, payload: Any) -> None:
        if isinstance(payload, Stream):
            self._send_stream(payload)
            return
        if payload is None or isinstance(payload, str):
            data, content_type = (payload or "").encode(), "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(payload).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, stream: Stream) -> None:
        """Send server-sent events in chunked encoding: each chunk as soon as it is ready."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in stream.chunks:
                self._write_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self._write_chunk(DONE)
            self._write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            logger.info("a client left a stream before its end")  # it decodes on, unread
            self.close_connection = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - " + format, self.address_string(), *args)


def _error(message: str, *, stream: bool = False) -> dict[str, Any]:
    if not stream:
        return {"error": {"message": message}}
    # SGLang's error line inside a stream (http_server.serve_generate_request)
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "code": 500,
            "retryable": False,
        }
    }


class _Stop(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT to leave serve_forever."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Leave serve_forever, once: the launcher and its supervisor may both send SIGTERM, and a
    second one raised again in the server's cleanup or in Python's atexit ends it with a
    traceback (seen once in the tests' server logs)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise _Stop(signum)


def _note_stop_signals() -> None:
    """Tell the ranks of a --tp-size server at once when SIGTERM or SIGINT arrives, even while
    the main thread, which runs Python's handlers, is inside a long call (joining the ranks):
    the same signal ends the ranks, and they must not be taken for a rank that failed."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)  # written by the C handler

    def watch() -> None:
        while data := os.read(read_end, 64):
            if {signal.SIGTERM, signal.SIGINT} & set(data):
                server_stopping()

    threading.Thread(target=watch, name="perfgate-stop-signals", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    """Stop the server once the process that started it is gone."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    logger.warning("parent process %d exited; shutting down", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGTERM, SIGINT or the parent's death; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="[%(asctime)s] %(message)s")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    _note_stop_signals()
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        server = start_server(args, argv)
    except PerfgateError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except _Stop:
        return ExitCode.PASS
    try:
        logger.info("Listening on http://%s:%d", args.host, args.port)
        print(READY_LINE, file=sys.stderr, flush=True)
        server.serve_forever()
    except _Stop as stop:
        logger.info("Stopping on signal %s", stop.args[0])
    finally:
        server.server_close()
    return ExitCode.PASS


def start_server(args: argparse.Namespace, argv: Sequence[str] = ()) -> Server:
    """Check the flags, load the models, then open the port; return the server, not serving.

    argv, the flags as given, start the other ranks of a --tp-size server.
    """
    app = build_app(args, check_args(args), argv)
    try:
        return Server((args.host, args.port), app)
    except OSError as error:
        raise InfrastructureError(
            f"cannot listen on {args.host}:{args.port}: {error.strerror or error}"
        ) from error


def _exit_now(code: int) -> None:
    """Exit without interpreter finalisation, after the atexit handlers (the probe's flush).

    Tearing torch down beside daemon threads at finalisation can abort the process
    ("terminate called without an active exception"), turning a clean stop into SIGABRT.
    """
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
