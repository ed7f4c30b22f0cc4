"""Models shared by the embedded engine's tests: CPU, float32, built once per session.

The models carry KV caches, so a test must not interleave two generations on one model; every
generation starts over at position 0, so tests need no reset between them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from perfgate.engines.embedded.corpus import Corpus
from perfgate.engines.embedded.drafters import Drafter, Eagle3Drafter, StandaloneDrafter
from perfgate.engines.embedded.graphs import GraphRunner
from perfgate.engines.embedded.loading import load_draft, load_target
from perfgate.engines.embedded.model import Eagle3Draft, Transformer
from perfgate.engines.embedded.params import SpecParams
from perfgate.engines.embedded.worker import EagleWorker, PlainWorker

from ..training_corpus import shared_corpus
from .common import CPU, DRAFT, TARGET, SpecWorkerFactory


@pytest.fixture(scope="package", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Run these tiny models on one thread: faster, and steadier on a shared machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """The training corpus of the session: built once, whichever worker needs it first."""
    return shared_corpus(request.config, tmp_path_factory)


@pytest.fixture(scope="session")
def target() -> Transformer:
    return load_target(TARGET, CPU, torch.float32)


@pytest.fixture(scope="session")
def eagle_head(target: Transformer) -> Eagle3Draft:
    return load_draft(DRAFT, target, CPU, torch.float32)


@pytest.fixture(scope="session")
def self_draft() -> Transformer:
    """The target's own weights in a second model: a draft the target always agrees with."""
    return load_target(TARGET, CPU, torch.float32)


@pytest.fixture(scope="session")
def perturbed_draft() -> Transformer:
    """The target with seeded noise on its weights: a draft that is right part of the time."""
    model = load_target(TARGET, CPU, torch.float32)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.add_(noise * 0.3 * param.std())
    return model


@pytest.fixture(scope="session")
def plain(target: Transformer) -> PlainWorker:
    return PlainWorker(target)


@pytest.fixture(scope="session")
def spec_worker(
    target: Transformer,
    eagle_head: Eagle3Draft,
    self_draft: Transformer,
    perturbed_draft: Transformer,
) -> SpecWorkerFactory:
    """Return a factory: (kind, num_steps, topk=1, num_draft_tokens=None, graphs="off") -> worker.

    num_draft_tokens defaults to a chain's num_steps + 1.
    """

    def make(
        kind: str,
        num_steps: int,
        topk: int = 1,
        num_draft_tokens: int | None = None,
        graphs: str = "off",
        feature_layers: tuple[int, ...] | None = None,
    ) -> EagleWorker:
        runner = GraphRunner(graphs)
        drafters: dict[str, Callable[[], Drafter]] = {
            "eagle3": lambda: Eagle3Drafter(eagle_head, topk, runner, feature_layers),
            "self": lambda: StandaloneDrafter(self_draft, topk, runner),
            "perturbed": lambda: StandaloneDrafter(perturbed_draft, topk, runner),
        }
        params = SpecParams(num_steps, topk, num_draft_tokens or num_steps + 1)
        return EagleWorker(target, drafters[kind](), params, graphs=runner)

    return make
