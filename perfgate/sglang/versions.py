"""Release numbers and ranges of them, for the version-keyed knowledge tables.

Pure and dependency-free: the probe imports it inside the server's interpreter, which may be
SGLang's own environment.

    >>> VersionRange(">=0.5.6,<0.5.13").contains("0.5.12.post1")
    True
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

# PEP 440 in the parts releases use: 0.5.6, 0.5.6.post2, 0.5.10rc1, 0.5.4.dev12+gabc.
_VERSION = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[.-]?(?P<pre>a|b|rc)\.?(?P<pre_n>\d+))?"
    r"(?:[.-]?post\.?(?P<post>\d+))?"
    r"(?:[.-]?dev\.?(?P<dev>\d+))?"
    r"(?:\+[\w.]+)?$",
    re.IGNORECASE,
)
_PRE_ORDER = {"a": 0, "b": 1, "rc": 2}
_FINAL = 3  # sorts a final release after its pre-releases


@dataclass(frozen=True, order=True)
class Version:
    """A release number that compares the way PEP 440 orders releases."""

    key: tuple[tuple[int, ...], int, int, int, int]
    text: str = field(compare=False)

    def __str__(self) -> str:
        return self.text


def parse_version(text: str) -> Version:
    """Parse `text` ("0.5.6.post2"); a ValueError names what is not a version."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a release number such as 0.5.23 or 0.5.6.post2")
    release = tuple(int(part) for part in match["release"].split("."))
    release += (0,) * (4 - len(release))  # 0.5 == 0.5.0
    pre = (_PRE_ORDER[match["pre"].lower()], int(match["pre_n"])) if match["pre"] else (_FINAL, 0)
    post = int(match["post"]) if match["post"] else -1
    dev = int(match["dev"]) if match["dev"] else 1 << 30
    if match["dev"] and not match["pre"] and not match["post"]:
        pre = (-1, 0)  # X.devN comes before X's pre-releases
    return Version((release, pre[0], pre[1], post, dev), text.strip())


_BOUND = re.compile(r"^(>=|<|==)\s*(\S+)$")


@dataclass(frozen=True)
class VersionRange:
    """A comma-separated conjunction of `>=X`, `<Y` and `==Z`: ">=0.5.6,<0.5.13"."""

    spec: str

    def __post_init__(self) -> None:
        self.bounds()  # refuse a malformed range when the table is built

    def bounds(self) -> list[tuple[str, Version]]:
        parsed = []
        for part in self.spec.split(","):
            match = _BOUND.match(part.strip())
            if match is None:
                raise ValueError(f"{self.spec!r}: {part.strip()!r} is not >=X, <X or ==X")
            parsed.append((match[1], parse_version(match[2])))
        return parsed

    def contains(self, version: str | Version) -> bool:
        """True when `version` satisfies every bound."""
        v = parse_version(version) if isinstance(version, str) else version
        checks: dict[str, Callable[[Version], bool]] = {
            ">=": lambda b: v >= b,
            "<": lambda b: _below(v, b),
            "==": lambda b: v.key == b.key,
        }
        return all(checks[op](bound) for op, bound in self.bounds())

    def __str__(self) -> str:
        return self.spec


def _below(version: Version, bound: Version) -> bool:
    # PEP 440: `<V` excludes V's own pre-releases (0.5.13rc0 belongs with 0.5.13).
    if version.key[0] == bound.key[0] and bound.key[1] == _FINAL and version.key[1] < _FINAL:
        return False
    return version < bound
