"""The engine behind the server: models loaded from the flags, the worker, and its totals."""

from __future__ import annotations

import argparse
import atexit
import importlib.metadata
import logging
import platform
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from perfgate.engines.embedded import folded_norms
from perfgate.engines.embedded.api import (
    WEIGHT_VERSION,
    GenerateRequest,
    InputLogprobs,
    render_generation,
)
from perfgate.engines.embedded.args import (
    resolve_attention_backend,
    resolve_device,
    resolve_dtype,
)
from perfgate.engines.embedded.batch import Generation
from perfgate.engines.embedded.compiling import compile_layers
from perfgate.engines.embedded.drafters import Drafter, Eagle3Drafter, StandaloneDrafter
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.loading import (
    DRAFT_ARCHITECTURE,
    draft_config,
    load_draft,
    load_target,
    model_identity,
    resolve_loadable,
    resolve_model,
    target_config,
)
from perfgate.engines.embedded.model import (
    BYTE_VOCAB,
    Transformer,
    fold_norms,
    fuse_projections,
    use_attention_backend,
)
from perfgate.engines.embedded.parallel import (
    Leader,
    TensorGroup,
    check_replicas,
    check_split,
    join_group,
    shard_model,
)
from perfgate.engines.embedded.params import SpecParams
from perfgate.engines.embedded.profiling import StepProfiler
from perfgate.engines.embedded.ranks import RankProcesses
from perfgate.engines.embedded.scheduler import Finished, Pending, Scheduler
from perfgate.engines.embedded.scoring import score_input
from perfgate.engines.embedded.worker import EagleWorker, PlainWorker
from perfgate.errors import ConfigError

ENGINE_NAME = "embedded"
# What /server_info reports as the batch limit when --max-running-requests is unset (every
# waiting request then decodes together): SGLang's clients divide their load by it.
UNLIMITED_RUNNING_REQUESTS = 4096

logger = logging.getLogger("perfgate.engines.embedded")


class Engine:
    """The worker behind its scheduler, and the totals that /server_info reports.

    On a tensor-parallel server, `leader` runs in the worker's place (``parallel.Leader``): it
    sends each batch, and each teacher-forced scoring, to the other ranks first.
    """

    def __init__(
        self,
        worker: PlainWorker | EagleWorker,
        max_running_requests: int | None = None,
        draft_tokens: int | None = None,
        leader: Leader | None = None,
    ) -> None:
        self.worker = worker
        self.leader = leader
        self.speculative = isinstance(worker, EagleWorker)
        self.draft_tokens = draft_tokens if self.speculative else None
        self.max_running_requests = max_running_requests
        self.lock = threading.Lock()  # the totals, written by the scheduler's thread
        self._verify_ct = 0
        self._accept_tokens = 0
        self._tokens = 0  # generated since the last report of last_gen_throughput
        self._throughput_since = time.perf_counter()
        self._last_gen_throughput = 0.0
        self.profiler = StepProfiler(worker.device, self._set_step_hook)
        self.scheduler = Scheduler(
            leader or worker,
            max_running_requests,
            self._count,
            self._after_batch,
            time.perf_counter,
        )

    def _set_step_hook(self, hook: Callable[[], None] | None) -> None:
        self.worker.step_hook = hook

    def _count(self, generation: Generation) -> None:
        with self.lock:
            self._verify_ct += generation.spec_verify_ct
            self._accept_tokens += generation.accept_tokens
            self._tokens += generation.completion_tokens

    def _after_batch(self) -> None:
        if self.profiler.busy:  # a profile ends with the batch it ran in
            self.profiler.after_request()

    def submit(self, request: GenerateRequest) -> list[Pending]:
        """Check every prompt, then queue them together; return what to wait on, in order."""
        requests = request.requests()
        for one in requests:
            self.worker.check(one)
        intervals = request.stream_intervals if request.stream else [None] * len(requests)
        pendings = [
            Pending(one, interval)
            for one, interval in zip(requests, intervals or [1] * len(requests), strict=True)
        ]
        self.scheduler.submit(pendings)
        return pendings

    def generate(self, request: GenerateRequest, received: float) -> list[dict[str, Any]]:
        """Decode the prompts (together, unless more wait than --max-running-requests).

        Returns SGLang's response objects, in the order of the prompts.
        """
        pendings = self.submit(request)
        starts = request.input_starts or [None] * len(pendings)
        inputs = [
            None
            if start is None
            else self.score(p.request.prompt_ids, start, p.request.top_logprobs_num or 0)
            for p, start in zip(pendings, starts, strict=True)
        ]
        return [
            self.render(pending, rid, received, pending.wait(), scored)
            for pending, rid, scored in zip(pendings, request.rids, inputs, strict=True)
        ]

    def score(self, ids: Sequence[int], start: int, top_n: int) -> InputLogprobs:
        """Score ids[start:] under the target by teacher forcing (``scoring.py``)."""
        if self.leader is not None:
            return self.leader.score(ids, start, top_n)
        return score_input(self.worker.target, ids, start, top_n)

    def render(
        self,
        pending: Pending,
        rid: str,
        received: float,
        finished: Finished,
        input_logprobs: InputLogprobs | None = None,
    ) -> dict[str, Any]:
        """Return SGLang's response object for a finished sequence."""
        request = pending.request
        return render_generation(
            finished.generation,
            len(request.prompt_ids),
            rid,
            finished.finished_at - received,
            self.draft_tokens,
            request.top_logprobs_num,
            input_logprobs,
        )

    def flush(self) -> None:
        """Reset the speculative totals, as SGLang's /flush_cache does."""
        with self.lock:
            self._verify_ct = self._accept_tokens = 0

    def internal_states(self) -> list[dict[str, Any]]:
        """Return SGLang's internal_states: one entry, as SGLang 0.5.23's scheduler fills it.

        ``effective_max_running_requests_per_dp`` is the batch limit (the waiting requests'
        count when unset: every one of them decodes together); ``last_gen_throughput`` the
        tokens per second generated since the previous read; with speculation,
        ``avg_spec_accept_length`` as SGLang's scheduler counts it: per request and verify
        pass, the accepted drafts plus the bonus token, averaged since the start or the last
        /flush_cache.
        """
        with self.lock:
            now = time.perf_counter()
            if self._tokens:
                self._last_gen_throughput = self._tokens / (now - self._throughput_since)
            self._tokens, self._throughput_since = 0, now
            state: dict[str, Any] = {
                "effective_max_running_requests_per_dp": self.max_running_requests
                or UNLIMITED_RUNNING_REQUESTS,
                "last_gen_throughput": self._last_gen_throughput,
            }
            if self.speculative:
                average = self._accept_tokens / self._verify_ct if self._verify_ct else 0.0
                state["avg_spec_accept_length"] = average
                timed = getattr(self.worker, "verify_ms_by_width", {})
                if timed:  # --debug-time-verify-widths, once measured
                    state["verify_ms_by_width"] = {str(w): ms for w, ms in timed.items()}
        return [state]


class App:
    """What the HTTP handler serves: the engine and the static part of /server_info."""

    def __init__(self, engine: Engine, info: dict[str, Any], context_len: int = 0) -> None:
        self.engine = engine
        self.info = info
        self.context_len = context_len
        self.created = int(time.time())

    def server_info(self) -> dict[str, Any]:
        """Return the server's args and identity, with the current internal states."""
        return {**self.info, "internal_states": self.engine.internal_states()}

    def model_info(self) -> dict[str, Any]:
        """Return SGLang 0.5.23's /model_info: the model's path, names and kind."""
        return {
            "model_path": self.info["model_path"],
            "served_model_name": self.info["served_model_name"],
            "tokenizer_path": self.info["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": WEIGHT_VERSION,
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
        }

    def models(self) -> dict[str, Any]:
        """Return SGLang 0.5.23's /v1/models: one ModelCard, the served model."""
        name = self.info["served_model_name"]
        card = {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.context_len,
        }
        return {"object": "list", "data": [card]}


def build_app(args: argparse.Namespace, spec: SpecParams | None, argv: Sequence[str] = ()) -> App:
    """Load the models, build the worker, warm it up; return the app to serve.

    With --tp-size N above 1, start ranks 1..N-1 first with the same flags (argv) and build
    this process's shard as rank 0; the ranks stop when this process exits.
    """
    leader: Leader | None = None
    started = threading.Event()  # set once the server can serve: the ranks are then up
    if args.tp_size > 1:
        check_tp(args, spec)
        port = _free_port(avoid=args.port)
        # Watched from now on: a rank that exits ends this process with exit code 69.
        ranks = RankProcesses(argv, args.tp_size, port)
        atexit.register(ranks.stop)
        started = ranks.started
        try:
            worker, group = build_worker(args, spec, rank=0, port=port)
        except BaseException:
            ranks.stop()
            raise
        assert group is not None
        leader = Leader(worker, group, after_failure=ranks.after_failed_job)
    else:
        worker, _ = build_worker(args, spec)
    draft_tokens = spec.num_draft_tokens if spec is not None else None
    engine = Engine(worker, args.max_running_requests, draft_tokens, leader=leader)
    warm_up(engine, spec)
    if isinstance(worker, EagleWorker):  # timed after the next batch, the client's
        worker.verify_widths = tuple(args.debug_time_verify_widths)
    started.set()
    device = worker.device
    args.device, args.dtype = device.type, str(worker.target.output.weight.dtype)
    args.dtype = args.dtype.removeprefix("torch.")
    args.tokenizer_path = args.tokenizer_path or str(resolve_model(args.model_path).path.resolve())
    args.served_model_name = args.served_model_name or args.model_path
    draft_path = args.speculative_draft_model_path if spec is not None else None
    seeded = args.load_format == "dummy"
    info = {
        **vars(args),
        "version": perfgate_version(),
        "engine": ENGINE_NAME,
        "model_identity": model_identity(args.model_path, seeded),
        "draft_model_identity": model_identity(draft_path, seeded) if draft_path else None,
        "device_name": device_name(device),
        "torch_version": torch.__version__,
    }
    return App(engine, info, context_len=worker.target.max_seq_len)


def build_worker(
    args: argparse.Namespace, spec: SpecParams | None, *, rank: int = 0, port: int | None = None
) -> tuple[PlainWorker | EagleWorker, TensorGroup | None]:
    """Load the models the flags name and build their worker, as rank `rank` of --tp-size.

    With --tp-size above 1 this process joins the server's group at 127.0.0.1:port first and
    keeps only its shard of each model (``parallel.py``); rank r runs on cuda:r on CUDA.
    """
    device = resolve_device(args.device)
    if device.type == "cuda" and args.tp_size > 1:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    dtype = resolve_dtype(args.dtype, device)
    torch.manual_seed(args.random_seed)
    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    group = None
    if args.tp_size > 1:
        assert port is not None
        group = join_group(rank, args.tp_size, port, device)
    target = load_target(args.model_path, device, dtype, args.load_format)
    _check_vocab(target, "--model-path")
    graphs = graph_runner(args, device)
    drafter = None
    if spec is not None:
        drafter = load_drafter(args, target, device, dtype, spec.topk, graphs)
    if group is not None:
        _shard(group, target, drafter)
    backend = resolve_attention_backend(args.attention_backend, device)
    _prepare(target, drafter, args.enable_torch_compile, backend)
    overlap = not args.disable_overlap_schedule
    worker: PlainWorker | EagleWorker = PlainWorker(target, graphs, args.random_seed, overlap)
    if spec is not None and drafter is not None:
        worker = EagleWorker(
            target,
            drafter,
            spec,
            verify_delay_ms=args.debug_verify_delay_ms,
            simulate_accept_rate=args.debug_simulate_accept_rate,
            seed=args.random_seed,
            graphs=graphs,
            slow_phases=args.debug_slow_phase,
            overlap=overlap,
        )
    return worker, group


def _shard(group: TensorGroup, target: Transformer, drafter: Drafter | None) -> None:
    check_replicas(group, target, "--model-path")
    shard_model(target, group)
    if drafter is not None:
        check_replicas(group, drafter.model, "--speculative-draft-model-path")
        shard_model(drafter.model, group)


def _prepare(
    target: Transformer, drafter: Drafter | None, torch_compile: bool, attention_backend: str
) -> None:
    """Fuse the models' projections for inference, fold the target's norms into them on
    CUDA (``folded_norms``), set their attention backend and, if asked, compile their
    layers."""
    models = [target] if drafter is None else [target, drafter.model]
    logger.info("attention backend: %s", attention_backend)
    for model in models:
        fuse_projections(model)
        weight = next(model.parameters())
        if model is target and weight.is_cuda and folded_norms.kernels_run(weight):
            logger.info("norms folded: %d layers", fold_norms(model))
        use_attention_backend(model, attention_backend)
        if torch_compile:
            logger.info("layers compiled: %d of %s", compile_layers(model), type(model).__name__)


def check_tp(args: argparse.Namespace, spec: SpecParams | None) -> None:
    """Raise ConfigError unless every model the flags name splits over --tp-size ranks and
    has its weights here (or --load-format dummy), and on CUDA, unless torch sees a GPU per
    rank, and unless --attention-backend can run there: before any rank starts."""
    resolve_attention_backend(args.attention_backend, resolve_device(args.device))
    if resolve_device(args.device).type == "cuda" and torch.cuda.device_count() < args.tp_size:
        raise ConfigError(
            f"{args.tp_size} ranks need {args.tp_size} GPUs; torch sees "
            f"{torch.cuda.device_count()}",
            field="--tp-size",
            fix="lower --tp-size, or widen CUDA_VISIBLE_DEVICES",
        )
    models = {"--model-path": args.model_path}
    if spec is not None:
        models["--speculative-draft-model-path"] = args.speculative_draft_model_path
    for flag, path in models.items():
        model = resolve_loadable(path, args.load_format)
        config = draft_config(model) if model.architecture == DRAFT_ARCHITECTURE else None
        sizes = config or target_config(model)
        check_split(args.tp_size, sizes.n_head, sizes.ffn_dim, flag)


def _free_port(avoid: int) -> int:
    """A free port for the ranks' rendezvous, never `avoid`: the HTTP port, free until the
    server listens on it after the models load, so the kernel may offer it here."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port != avoid:
            return port


def graph_runner(args: argparse.Namespace, device: torch.device) -> GraphRunner:
    """The CUDA graphs the server's flags ask for: every forward of a fixed shape on CUDA
    unless --disable-cuda-graph, and the prefills too with --cuda-graph-backend-prefill full."""
    mode = "cuda" if device.type == "cuda" and not args.disable_cuda_graph else "off"
    return GraphRunner(mode, prefill=args.cuda_graph_backend_prefill == "full")


def load_drafter(
    args: argparse.Namespace,
    target: Transformer,
    device: torch.device,
    dtype: torch.dtype,
    topk: int,
    graphs: GraphRunner,
) -> Drafter:
    """Load the draft model that --speculative-algorithm asks for."""
    path = args.speculative_draft_model_path
    is_head = resolve_model(path).architecture == DRAFT_ARCHITECTURE
    if args.speculative_algorithm == "STANDALONE":
        if is_head:
            raise ConfigError(
                f"{path} is an EAGLE-3 head; STANDALONE drafts with a full model",
                field="--speculative-draft-model-path",
                fix="use --speculative-algorithm EAGLE3, or a target model such as "
                "perfgate/llama-tiny",
            )
        model = load_target(path, device, dtype, args.load_format)
        _check_vocab(model, "--speculative-draft-model-path")
        return StandaloneDrafter(model, topk, graphs)
    if not is_head:
        raise ConfigError(
            f"{path} is a full model, not an EAGLE-3 head",
            field="--speculative-draft-model-path",
            fix="use --speculative-algorithm STANDALONE to draft with it, or an EAGLE-3 head "
            "such as perfgate/eagle3-llama-tiny",
        )
    head = load_draft(path, target, device, dtype, args.load_format)
    layers = args.debug_eagle3_feature_layers
    if layers is not None:
        _check_layers(layers, target)
    return Eagle3Drafter(head, topk, graphs, layers)


def _check_layers(layers: tuple[int, ...], target: Transformer) -> None:
    bad = [i for i in layers if not 0 <= i <= target.config.n_layer]
    if bad:
        raise ConfigError(
            f"{bad} are outside the target's hidden states 0..{target.config.n_layer}",
            field="--debug-eagle3-feature-layers",
        )


def _check_vocab(model: Transformer, flag: str) -> None:
    if model.config.vocab_size != BYTE_VOCAB:
        raise ConfigError(
            f"vocab_size is {model.config.vocab_size}; the byte-level tokenizer needs {BYTE_VOCAB}",
            field=flag,
        )


def warm_up(engine: Engine, spec: SpecParams | None) -> None:
    """Run one short request through every phase, then reset the totals."""
    steps = spec.num_steps if spec is not None else 1
    request = GenerateRequest([[0, 1, 2, 3]], [2 * steps + 2], ["warm-up"], is_batch=False)
    engine.generate(request, time.perf_counter())
    engine.flush()


def perfgate_version() -> str:
    """Return perfgate's installed version, or 0+unknown when it runs from a source tree."""
    try:
        return importlib.metadata.version("perfgate")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def device_name(device: torch.device) -> str:
    """Return the accelerator's name, or the CPU's model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
