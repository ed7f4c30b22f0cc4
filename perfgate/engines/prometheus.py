"""Read SGLang's `/metrics` (Prometheus text format) and take counter deltas around a run.

With `--enable-metrics` and `SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`, SGLang counts GPU seconds
per forward category in `sglang:forward_execution_seconds_total{category=...}` (0.5.11 on;
`sglang:gpu_execution_seconds_total` in 0.5.7-0.5.10): `target_verify`, `eagle_draft` and
`eagle_draft_extend` from CUDA-graph replays, `decode`/`extend`/`idle` otherwise. perfgate
records the deltas it finds around the measured repeats and compares them with the probe;
nothing is gated on them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from perfgate.sglang.facts import all_names

# `name{label="value",...} value [timestamp]`; labels optional.
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

# The counters perfgate keeps, by role in perfgate.sglang.facts.FACTS.
COUNTER_ROLES = ("device_time", "verify_calls")
# Probe phase -> the device-timer category that times the same work (CUDA-graph replays).
CATEGORY_OF_PHASE = {
    "verify": "target_verify",
    "draft": "eagle_draft",
    "draft_extend": "eagle_draft_extend",
}


def parse_metrics(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text page, keyed `name{label="v",...}` (labels sorted)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = sorted(_LABEL.findall(match["labels"] or ""))
        key = match["name"] + (
            "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""
        )
        samples[key] = value
    return samples


def counter_deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """The growth of the counters perfgate keeps (device time, verify calls) between pages."""
    names = tuple(name for role in COUNTER_ROLES for name in all_names(role))
    deltas = {}
    for key, value in after.items():
        if key.split("{", 1)[0] in names:
            deltas[key] = value - before.get(key, 0.0)
    return deltas


def device_seconds_by_category(deltas: Mapping[str, float]) -> dict[str, float]:
    """`category -> seconds` from the device-time counters among `deltas` (summed over the
    other labels, such as the TP rank)."""
    names = all_names("device_time")
    by_category: dict[str, float] = {}
    for key, value in deltas.items():
        name, _, labels = key.partition("{")
        if name not in names:
            continue
        category = dict(_LABEL.findall(labels)).get("category", "")
        by_category[category] = by_category.get(category, 0.0) + value
    return by_category
