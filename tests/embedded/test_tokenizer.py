"""The shipped byte-level tokenizer in the Hugging Face format."""

from __future__ import annotations

import json
from pathlib import Path

from perfgate.engines.embedded import tokenizer
from perfgate.engines.embedded.api import encode_text


def test_every_shipped_target_carries_the_tokenizer_the_script_writes() -> None:
    targets = tokenizer.shipped_targets()
    assert [t.name for t in targets] == ["llama-large", "llama-tiny"]
    for folder in targets:
        assert tokenizer.stale_files(folder) == [], f"run python -m {tokenizer.__name__}"


def test_the_vocabulary_maps_each_bytes_stand_in_to_the_byte(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 256, "max_seq_len": 64}))
    assert tokenizer.main(["--check", str(tmp_path)]) == 1  # nothing written yet
    assert tokenizer.main([str(tmp_path)]) == 0
    assert tokenizer.main(["--check", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab = document["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(256)) and document["model"]["merges"] == []
    characters = tokenizer.byte_characters()
    text = "héllo\n"
    # What the ByteLevel pre-tokenizer does to text, then the BPE lookup without merges:
    ids = [vocab[characters[b]] for b in text.encode("utf-8")]
    assert ids == encode_text(text)
    assert characters[ord("a")] == "a" and characters[ord(" ")] == "\u0120"  # GPT-2's 'Ġ'
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["model_max_length"] == 64
