"""Stage SGLang for a machine that reaches no network: download on this host, carry in parts.

    python benchmarks/sglang_stage.py download [--set S] [--dest DIR]  # here: wheels, trimmed
    python benchmarks/sglang_stage.py pack [--set S] [--dest DIR]      # here: tar, in parts
    python benchmarks/sglang_stage.py check PART              # there: one part arrived whole
    python benchmarks/sglang_stage.py assemble SITE [--dest DIR]  # there: join, install

`download` asks pip (PyPI only) for each wheel of `WHEELS` for CPython 3.12 on
manylinux_2_34 x86_64, one version each and no dependencies (`--no-deps`: the list is the
closure, measured, not `Requires-Dist`). `sglang-kernel`'s wheel is rebuilt without what a
Hopper GPU never loads (`KERNEL_DROPPED`: `flash_ops`, `infllm_ops`, `flashmla_ops` and the
`sm100/` build; 383 MB down to a few). `pack` puts the wheels into one tar and splits it into
`parts/NN/` folders of at most `--part-mib` MiB each, every folder with the manifest (each
wheel's size and SHA-256, each chunk's), so that one device call can carry one folder (the
working tree travels too: 64 MiB a call in all). The device keeps ignored files between warm
calls: after the last part, `assemble` checks every chunk, joins them, checks every wheel and
installs them with `pip install --no-index --no-deps --target SITE`.

S is `live` (WHEELS, the default) or `graphs` (GRAPH_WHEELS: what CUDA graphs add). DIR
defaults to the set's folder in the checkout, `.cache/sglang-live` or `.cache/sglang-graphs`
(git-ignored). What was downloaded, and
the sizes, go to DIR/stage.json and are printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DEST = REPO / ".cache" / "sglang-live"
# The H200 image's Python 3.12 on glibc 2.39: pip matches a wheel's manylinux tag only against
# the exact tags it is given, so every glibc from 2.17 (manylinux2014) up to 2.39 is named.
PLATFORM = (
    *(f"--platform=manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)),
    "--platform=manylinux2014_x86_64",
    "--python-version=3.12",
    "--abi=cp312",
    "--implementation=cp",
    "--only-binary=:all:",
    "--no-deps",
)
SGLANG, KERNEL = "sglang==0.5.16", "sglang-kernel==0.4.5"
# What a launch of SGLang 0.5.16 (a Llama target, EAGLE-3, triton attention, on CUDA) imports
# that the H200 image lacks, or holds in another version: the closure measured on a CPU
# (benchmarks/sglang_closure.py: 82 distributions, 34 of them not in the image, up to the
# target's rotary embedding, where the CPU path leaves CUDA's for vllm's ops), the CUDA-only
# imports read in its source (sgl_kernel; flashinfer, which srt/layers/sampler.py imports on
# CUDA: `import flashinfer` needs only apache-tvm-ffi beyond the image, measured the same way),
# SGLang's own pins (transformers 5.12.1 with tokenizers 0.22.2: the image's 5.17 rejects
# SGLang's registration of qwen3_asr; typing-extensions 4.16), and what perfgate imports that
# the image lacks (SQLAlchemy, alembic, Mako, greenlet). The GPU run measures it again.
WHEELS = (
    SGLANG,
    KERNEL,
    "flashinfer-python==0.6.14",
    "transformers==5.12.1",
    "tokenizers==0.22.2",
    "xgrammar==0.2.1",
    "apache-tvm-ffi==0.1.11",
    "openai==2.6.1",
    "distro==1.9.0",
    "sniffio==1.3.1",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing-extensions==4.16.0",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "opentelemetry-api==1.45.2",
    "orjson==3.13.0",
    "msgspec==0.23.0",
    "pyzmq==27.3.0",
    "pybase64==1.5.1",
    "setproctitle==1.3.8",
    "python-multipart==0.0.34",
    "partial-json-parser==0.2.1.1.post7",
    "dill==0.4.1",
    "ipython==9.18.1",
    "traitlets==5.16.1",
    "compressed-tensors==0.20.1",
    "loguru==0.7.3",
    "gguf==0.19.0",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "soundfile==0.14.0",
    "cffi==2.1.1",
    "sqlalchemy==2.1.9",
    "alembic==1.20.1",
    "mako==1.4.3",
    "greenlet==3.5.6",
    # SGLang's own clients (sglang.bench_one_batch_server, sglang.benchmark.serving) import
    # sglang.benchmark.datasets, which imports Hugging Face `datasets` at its top: the H200 run
    # of 2026-12-02 stopped there ("No module named 'datasets'"). The image has what datasets
    # 5.2.0 needs (pyarrow 25.0.1, pandas, fsspec 2026.7.0, xxhash, huggingface_hub 1.33.0)
    # except multiprocess; dill 0.4.1 is staged above.
    "datasets==5.2.0",
    "multiprocess==0.70.19",
)
# What SGLang 0.5.16 imports beyond WHEELS once CUDA graphs are on: EagleDraftWorker's
# _capture_cuda_graphs imports the attention backends of srt/layers/attention (dsa_backend
# needs `deep_gemm`; dsa_indexer imports cutedsl, which needs `cutlass` and `cutlass.cute`),
# read in its source; cutlass-dsl wants protobuf < 7 (the image has 7.36.2) and
# nvidia-cuda-nvdisasm, which the image lacks. deep_gemm needs apache-tvm-ffi, in WHEELS.
# Staged apart (`download --set graphs`, into .cache/sglang-graphs), to travel after WHEELS.
GRAPH_WHEELS = (
    "sgl-deep-gemm==0.1.4.post1",
    "nvidia-cutlass-dsl==4.6.0",
    "nvidia-cutlass-dsl-libs-base==4.6.0",
    "nvidia-cutlass-dsl-libs-core==4.6.0",
    "nvidia-cutlass-dsl-libs-cu13==4.6.0",
    "protobuf==6.33.6",
    "nvidia-cuda-nvdisasm==13.5.37",
)


@dataclass(frozen=True)
class WheelSet:
    """A set `--set` names: its wheels, and the folder it stages into by default."""

    wheels: tuple[str, ...]
    dest: Path  # git-ignored


SETS = {
    "live": WheelSet(WHEELS, DEFAULT_DEST),
    "graphs": WheelSet(GRAPH_WHEELS, REPO / ".cache" / "sglang-graphs"),
}
# sglang-kernel 0.4.5's files a Hopper GPU does not load (checked on an H200: without them
# sgl_kernel imports against torch 2.11.0+cu130 and its rmsnorm matches a reference).
KERNEL_DROPPED = ("sgl_kernel/flash_ops", "sgl_kernel/infllm_ops", "sgl_kernel/flashmla_ops",
                  "sgl_kernel/sm100/")  # fmt: skip
PART_MIB = 48  # a part and the working tree (8.3 MiB) inside one call's 64 MiB
TAR_NAME = "wheels.tar"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Wheel:
    file: str
    bytes: int
    sha256: str


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def pip_download(requirement: str, into: Path) -> Path:
    """Download one wheel of requirement for the H200's Python into `into`; return it."""
    into.mkdir(parents=True, exist_ok=True)
    before = set(into.glob("*.whl"))
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(
        [*command, *PLATFORM, "--dest", str(into), requirement],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip download {requirement} failed:\n{done.stderr[-2000:]}")
    name = requirement.split("==")[0].replace("-", "_").lower()
    found = [p for p in into.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if len(found) != 1:
        raise RuntimeError(f"{requirement}: expected one wheel in {into}, found {found or before}")
    return found[0]


def trim_kernel(wheel: Path, out: Path, dropped: Iterable[str] = KERNEL_DROPPED) -> list[str]:
    """Rewrite the sglang-kernel wheel without the `dropped` paths (and their RECORD rows);
    return the names left out."""
    prefixes = tuple(dropped)
    left_out: list[str] = []
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dest:
        for item in source.infolist():
            if item.filename.startswith(prefixes):
                left_out.append(item.filename)
                continue
            data = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                rows = data.decode().splitlines(keepends=True)
                data = "".join(r for r in rows if not r.startswith(prefixes)).encode()
            dest.writestr(item, data)
    return left_out


@dataclass(frozen=True)
class Staged:
    wheels: list[Wheel]
    kernel_wheel_bytes: int  # sglang-kernel's wheel as released
    kernel_trimmed_bytes: int
    kernel_left_out: list[str]

    @property
    def total_bytes(self) -> int:
        return sum(w.bytes for w in self.wheels)


def download(dest: Path, requirements: tuple[str, ...] = WHEELS) -> Staged:
    """Every wheel of `requirements` into dest/wheels (the kernel, where listed, trimmed);
    what came, with sizes."""
    wheels, raw = dest / "wheels", dest / "raw"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    kernel_bytes = trimmed_bytes = 0
    left_out: list[str] = []
    if KERNEL in requirements:
        kernel_raw = pip_download(KERNEL, raw)
        kernel = wheels / kernel_raw.name
        left_out = trim_kernel(kernel_raw, kernel)
        kernel_bytes, trimmed_bytes = kernel_raw.stat().st_size, kernel.stat().st_size
    for requirement in requirements:
        if requirement != KERNEL:
            pip_download(requirement, wheels)
    found = [Wheel(p.name, p.stat().st_size, sha256(p)) for p in sorted(wheels.glob("*.whl"))]
    staged = Staged(found, kernel_bytes, trimmed_bytes, left_out)
    report = asdict(staged) | {"total_bytes": staged.total_bytes}
    (dest / "stage.json").write_text(json.dumps(report, indent=1) + "\n")
    return staged


def pack(dest: Path, part_bytes: int = PART_MIB * 2**20) -> dict[str, Any]:
    """dest/wheels as one tar, split into dest/parts/NN/ of at most part_bytes each."""
    wheels = sorted((dest / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"{dest / 'wheels'}: no wheels; run `download` first")
    archive = dest / TAR_NAME
    with tarfile.open(archive, "w") as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=wheel.name)
    parts = dest / "parts"
    shutil.rmtree(parts, ignore_errors=True)
    chunks: list[dict[str, Any]] = []
    with archive.open("rb") as source:
        while data := source.read(part_bytes):
            folder = parts / f"{len(chunks) + 1:02d}"
            folder.mkdir(parents=True)
            (folder / "chunk").write_bytes(data)
            chunks.append({"part": folder.name, "bytes": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    manifest = {
        "tar_bytes": archive.stat().st_size,
        "tar_sha256": sha256(archive),
        "parts": chunks,
        "wheels": [asdict(Wheel(w.name, w.stat().st_size, sha256(w))) for w in wheels],
    }
    for chunk in chunks:
        (parts / str(chunk["part"]) / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    archive.unlink()
    return manifest


def check_part(folder: Path) -> str:
    """Whether the part in folder arrived whole: its chunk's SHA-256 against the manifest."""
    manifest = json.loads((folder / MANIFEST).read_text())
    entry = next(p for p in manifest["parts"] if p["part"] == folder.name)
    got = sha256(folder / "chunk")
    if got != entry["sha256"]:
        raise SystemExit(f"{folder}: chunk sha256 {got}, manifest says {entry['sha256']}")
    return f"part {folder.name} of {len(manifest['parts'])}: {entry['bytes']} bytes, whole"


def assemble(dest: Path, site: Path) -> list[str]:
    """Join the parts, check the wheels, install them into site; return the wheels' names."""
    parts = sorted((dest / "parts").iterdir())
    manifest = json.loads((parts[0] / MANIFEST).read_text())
    names = [p["part"] for p in manifest["parts"]]
    missing = sorted(set(names) - {p.name for p in parts})
    if missing:
        raise SystemExit(f"{dest / 'parts'}: parts {missing} have not arrived; carry them first")
    for name in names:
        check_part(dest / "parts" / name)
    unpacked = dest / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    unpacked.mkdir(parents=True)
    archive = unpacked / TAR_NAME
    with archive.open("wb") as out:
        for name in names:
            out.write((dest / "parts" / name / "chunk").read_bytes())
    if sha256(archive) != manifest["tar_sha256"]:
        raise SystemExit(f"{archive}: the joined parts differ from the packed archive")
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    archive.unlink()
    for wheel in manifest["wheels"]:
        if sha256(unpacked / wheel["file"]) != wheel["sha256"]:
            raise SystemExit(f"{wheel['file']}: sha256 differs from the manifest")
    files = [str(unpacked / w["file"]) for w in manifest["wheels"]]
    install = ["install", "--quiet", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    command = [sys.executable, "-m", "pip", *install, "--upgrade", "--target", str(site), *files]
    subprocess.run(command, check=True)
    return [w["file"] for w in manifest["wheels"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    for name in ("download", "pack"):
        action = actions.add_parser(name)
        action.add_argument("--dest", type=Path, default=None, help="default: the set's folder")
        action.add_argument("--set", choices=sorted(SETS), default="live", dest="wheel_set")
        if name == "pack":
            action.add_argument("--part-mib", type=int, default=PART_MIB)
    actions.add_parser("check").add_argument("part", type=Path)
    assemble_parser = actions.add_parser("assemble")
    assemble_parser.add_argument("site", type=Path)
    assemble_parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    if args.action in ("download", "pack") and args.dest is None:
        args.dest = SETS[args.wheel_set].dest
    if args.action == "download":
        staged = download(args.dest, SETS[args.wheel_set].wheels)
        for wheel in staged.wheels:
            print(f"{wheel.bytes / 2**20:8.2f} MiB  {wheel.file}")
        kernel = (
            f"; sglang-kernel {staged.kernel_wheel_bytes / 2**20:.1f} MiB -> "
            f"{staged.kernel_trimmed_bytes / 2**20:.1f} MiB trimmed"
            if staged.kernel_wheel_bytes
            else ""
        )
        print(f"{staged.total_bytes / 2**20:8.2f} MiB in all{kernel}")
    elif args.action == "pack":
        manifest = pack(args.dest, args.part_mib * 2**20)
        for part in manifest["parts"]:
            print(f"{args.dest / 'parts' / part['part']}: {part['bytes'] / 2**20:.2f} MiB")
    elif args.action == "check":
        print(check_part(args.part))
    else:
        for name in assemble(args.dest, args.site):
            print(f"installed {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
