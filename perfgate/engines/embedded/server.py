"""The embedded engine's HTTP server, launched and spoken to like ``sglang.launch_server``.

    python -m perfgate.engines.embedded.server --model-path perfgate/llama-tiny \\
        --speculative-algorithm EAGLE3 --speculative-draft-model-path perfgate/eagle3-llama-tiny \\
        --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4

Endpoints, as in SGLang: ``POST /generate`` (``text`` or ``input_ids``, single or a list that
decodes as one batch of up to ``--max-running-requests``; greedy only; ``return_logprob`` and
``top_logprobs_num`` for output tokens), ``GET /health``, ``GET /health_generate`` (after a
one-token generation),
``GET /server_info`` (alias ``/get_server_info``: the args, the engine, the model identities and
``internal_states[0].avg_spec_accept_length``), ``POST /flush_cache`` (resets that average), and
``POST /start_profile`` and ``POST /stop_profile`` (torch.profiler over a few decode cycles,
with SGLang's request body: see ``profiling.py``).

Models load before the port opens, so ``/health`` answers only once the server can generate.
SIGTERM or SIGINT, or the death of the parent process, stops it with exit code 0.
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
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from perfgate.engines.embedded.api import GenerateRequest, parse_generate
from perfgate.engines.embedded.args import check_args, parse_args
from perfgate.engines.embedded.batch import RequestError
from perfgate.engines.embedded.engine import App, build_app
from perfgate.engines.embedded.profiling import parse_profile_request
from perfgate.errors import ExitCode, InfrastructureError, PerfgateError

READY_LINE = "The server is fired up and ready to roll!"  # SGLang's words; launchers wait on it
FLUSHED = "Cache flushed.\n"

logger = logging.getLogger("perfgate.engines.embedded")

# A route takes the app, the request body and its arrival time; it returns (status, payload),
# where a str payload is sent as text, None as an empty body and anything else as JSON.
Route = Callable[[App, bytes, float], tuple[int, Any]]


def _generate(app: App, body: bytes, received: float) -> tuple[int, Any]:
    try:
        request = parse_generate(json.loads(body or b"null"))
    except json.JSONDecodeError as error:
        raise RequestError(f"the body is not JSON ({error})") from error
    responses = app.engine.generate(request, received)
    return 200, responses if request.is_batch else responses[0]


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
        if payload is None or isinstance(payload, str):
            data, content_type = (payload or "").encode(), "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(payload).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - " + format, self.address_string(), *args)


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message}}


class _Stop(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT to leave serve_forever."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def _watch_parent(parent_pid: int) -> None:
    """Stop the server once the process that started it is gone."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    logger.warning("parent process %d exited; shutting down", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGTERM, SIGINT or the parent's death; return the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="[%(asctime)s] %(message)s")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        server = start_server(args)
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


def start_server(args: argparse.Namespace) -> Server:
    """Check the flags, load the models, then open the port; return the server, not serving."""
    app = build_app(args, check_args(args))
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
