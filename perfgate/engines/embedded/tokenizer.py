"""The shipped models' tokenizer in the Hugging Face ``tokenizers`` format, built from scratch.

The embedded engine tokenizes text as its UTF-8 bytes: token id ``b`` is the byte ``b``, 256
tokens, no special tokens, no EOS (``api.encode_text``). SGLang's clients
(``sglang.benchmark.serving``, ``bench_one_batch_server``) load a tokenizer with
``transformers.AutoTokenizer`` from a local folder; this writes one that tokenizes the same
way: a byte-level BPE without merges (each byte its own token, shown as GPT-2's printable
stand-in character for that byte), ids equal to byte values.

    python -m perfgate.engines.embedded.tokenizer [--check] [FOLDER ...]

writes ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` into each
folder (default: every shipped target model); ``--check`` exits 1 if a folder's files differ
from what this would write. The output depends on nothing but this file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from perfgate.engines.embedded.loading import MODELS_DIR, TARGET_ARCHITECTURE
from perfgate.engines.embedded.model import BYTE_VOCAB

FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def byte_characters() -> list[str]:
    """GPT-2's printable character for each byte 0..255 (``bytes_to_unicode``), the alphabet
    of the ``ByteLevel`` pre-tokenizer and decoder."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    characters: dict[int, int] = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in characters:
            characters[b] = 256 + extra
            extra += 1
    return [chr(characters[b]) for b in range(256)]


def tokenizer_json() -> dict[str, object]:
    """The ``tokenizers`` document: byte-level BPE, no merges, token id = byte value."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {**byte_level, "use_regex": False},
        "post_processor": None,
        "decoder": {**byte_level, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {char: byte for byte, char in enumerate(byte_characters())},
            "merges": [],
        },
    }


def tokenizer_config(model_max_length: int) -> dict[str, object]:
    """``tokenizer_config.json``: the fast tokenizer, no special tokens, no added spaces."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {},
    }


def render_files(model_max_length: int) -> dict[str, str]:
    """Each file's text, by name."""
    documents = {
        "tokenizer.json": tokenizer_json(),
        "tokenizer_config.json": tokenizer_config(model_max_length),
        "special_tokens_map.json": {},
    }
    return {
        name: json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        for name, doc in documents.items()
    }


def _max_length(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text())
    if config.get("vocab_size", BYTE_VOCAB) != BYTE_VOCAB:
        raise ValueError(f"{folder}: vocab_size is not {BYTE_VOCAB}, not a byte-level model")
    return int(config["max_seq_len"])


def shipped_targets() -> list[Path]:
    """The shipped target models' folders (drafts use their target's tokenizer)."""
    return sorted(
        p.parent
        for p in MODELS_DIR.glob("*/config.json")
        if json.loads(p.read_text()).get("architecture") == TARGET_ARCHITECTURE
    )


def stale_files(folder: Path) -> list[str]:
    """The tokenizer files of `folder` that are missing or differ from what would be written."""
    wanted = render_files(_max_length(folder))
    return [
        name
        for name, text in wanted.items()
        if not (folder / name).is_file() or (folder / name).read_text("utf-8") != text
    ]


def write_files(folder: Path) -> None:
    """Write the tokenizer files into a model folder."""
    for name, text in render_files(_max_length(folder)).items():
        (folder / name).write_text(text, "utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    folders = args.folders or shipped_targets()
    stale = {folder: stale_files(folder) for folder in folders}
    if args.check:
        for folder, names in stale.items():
            for name in names:
                print(f"{folder / name}: stale; run python -m {__spec__.name}", file=sys.stderr)
        return 1 if any(stale.values()) else 0
    for folder in folders:
        write_files(folder)
        print(f"wrote {', '.join(FILES)} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
