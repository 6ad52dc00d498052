"""The caption length is the text encoder's position table, not whatever a tokenizer folder says.

Cases: the minimal CLIP tokenizer layout the docs name (``vocab.json`` + ``merges.txt``, no
``tokenizer_config.json``: transformers then reports a length of 10**30); ``model_max_length: 1e8`` (10**8 tokens per
caption); 77 against a 16-position text encoder. Every caption is padded and cut to the encoder's
``max_position_embeddings`` (or the tokenizer's length where smaller), which is itself bounded."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from fault_helpers import assert_one_line, entries
from untrusted_files import attack_model

pytest.importorskip("transformers")

from untrusted_t2i import PEAK_LIMIT_KB, edited, run_measured, tiny_pipeline

SHIPPED_VOCAB = Path(__file__).resolve().parents[2] / "privbench" / "models" / "t2i_tokenizer"


@pytest.fixture(scope="module")
def t2i(tmp_path_factory):
    return tiny_pipeline(tmp_path_factory.mktemp("t2i"))


@pytest.fixture(scope="module")
def reference_scores(t2i, tmp_path_factory):
    """The loss scores of the unchanged pipeline (its tokenizer says 16, as many positions as its encoder)."""
    runs = tmp_path_factory.mktemp("ref") / "runs"
    r = attack_model(t2i["pipe"], t2i["members"], t2i["nonmembers"], runs)
    assert r.code == 0, r
    return _scores(runs)


def _scores(runs: Path) -> np.ndarray:
    (f,) = [p for p in runs.glob("external-*/scores.npz")]
    return np.load(f)["scores"]


def test_the_minimal_tokenizer_layout_loads_and_attacks(tmp_path, t2i, reference_scores):
    """tokenizer/ with vocab.json + merges.txt only (the layout privbench ships its own vocabulary in)."""
    model = tmp_path / "m"
    shutil.copytree(t2i["pipe"], model)
    shutil.rmtree(model / "tokenizer")
    (model / "tokenizer").mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(SHIPPED_VOCAB / name, model / "tokenizer" / name)
    r = attack_model(model, t2i["members"], t2i["nonmembers"], tmp_path / "runs")
    assert r.code == 0, r
    np.testing.assert_allclose(_scores(tmp_path / "runs"), reference_scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [77, 10 ** 8], ids=["77", "1e8"])
def test_a_tokenizer_longer_than_the_encoder_is_cut_to_its_positions(tmp_path, t2i, reference_scores, length):
    model = edited(t2i["pipe"], tmp_path / "m", "tokenizer", "tokenizer_config.json", model_max_length=length)
    code, lines, peak_kb = run_measured("attack", "--model", model, "--members", t2i["members"], "--nonmembers",
                                        t2i["nonmembers"], "--attack", "loss", "--runs-dir", tmp_path / "runs",
                                        "--device", "cpu")
    assert code == 0, (code, lines)
    assert 0 < peak_kb < PEAK_LIMIT_KB, peak_kb
    print(f"peak resident memory with model_max_length {length}: {peak_kb / 1024:.0f} MB")
    np.testing.assert_allclose(_scores(tmp_path / "runs"), reference_scores, rtol=1e-5, atol=1e-6)


def test_a_shorter_tokenizer_length_is_kept():
    from privbench.models.outside_config import caption_tokens

    class Encoder:
        class config:
            max_position_embeddings = 77

    class Tok:
        model_max_length = 16

    assert caption_tokens(Tok(), Encoder()) == 16
    Tok.model_max_length = 10 ** 30
    assert caption_tokens(Tok(), Encoder()) == 77


def test_a_text_encoder_with_too_many_positions_is_refused(tmp_path, t2i):
    model = edited(t2i["pipe"], tmp_path / "m", "text_encoder", max_position_embeddings=5000)
    r = attack_model(model, t2i["members"], t2i["nonmembers"], tmp_path / "runs")
    assert_one_line(r, 2, "(text_encoder/): config.json max_position_embeddings=5000; expected an integer in "
                          "2..1024")
    assert entries(tmp_path / "runs") == []
