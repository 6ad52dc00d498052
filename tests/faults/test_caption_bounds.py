"""Captions cannot allocate without bound: every caption, whatever its source, is at most 10,000 characters, and
the bound is checked before the text exists where it can be.

A template's format specs are checked, not only its field names (``--caption '{label:>999999999}'`` would be a
gigabyte per record); an ``.npz`` caption array is bounded from its header (one 5-million-character caption among
64 records is a 1.3 GB unicode array once loaded); ``metadata.jsonl`` captions over the bound are refused, never
cut; a spec the value cannot take (``{word:d}``) is bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest
from fault_helpers import assert_one_line, entries
from untrusted_files import attack_model, digits_records

pytest.importorskip("transformers")

from untrusted_t2i import PEAK_LIMIT_KB, run_measured, tiny_pipeline

LIMIT = "10,000"


@pytest.fixture(scope="module")
def t2i(tmp_path_factory):
    return tiny_pipeline(tmp_path_factory.mktemp("t2i"))


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """Labelled digits records without captions (the --caption template fills them)."""
    return digits_records(tmp_path_factory.mktemp("records"))


def _measured_attack(t2i, members, nonmembers, runs, *extra):
    return run_measured("attack", "--model", t2i["pipe"], "--members", members, "--nonmembers", nonmembers,
                        "--attack", "loss", "--runs-dir", runs, "--device", "cpu", *extra)


def test_a_template_that_pads_a_billion_characters(tmp_path, t2i, labelled):
    code, lines, peak_kb = _measured_attack(t2i, *labelled, tmp_path / "runs", "--caption", "{label:>999999999}")
    assert code == 2 and len(lines) == 1, (code, lines)
    assert "{label:>999999999} pads or cuts beyond 10,000 characters" in lines[0], lines
    assert 0 < peak_kb < PEAK_LIMIT_KB, peak_kb
    print(f"peak resident memory refusing --caption '{{label:>999999999}}': {peak_kb / 1024:.0f} MB")
    assert entries(tmp_path / "runs") == []


@pytest.mark.parametrize("template,needle", [
    ("a {word:.99999}", "{word:.99999} pads or cuts beyond 10,000 characters"),
    ("{label:{word}}", "{label} takes its format from another field"),
    ("{word:d}", "cannot fill it for label"),
    ("{label:>9000}{label:>9000}", f"18,000 characters; a caption is limited to {LIMIT}"),
])
def test_bad_templates(tmp_path, t2i, labelled, template, needle):
    r = attack_model(t2i["pipe"], *labelled, tmp_path / "runs", "--caption", template)
    assert_one_line(r, 2, needle)
    assert entries(tmp_path / "runs") == []


def test_a_bad_template_in_a_text_to_image_training(tmp_path):
    """Refused by the method's checks, before the run or its shared pre-training folder is created."""
    code, lines, peak_kb = run_measured("train", "--method", "txt2img", "--preset", "test", "--set",
                                        "t2i.caption={label:>999999999}", "--runs-dir", tmp_path / "runs")
    assert code == 2 and len(lines) == 1 and "pads or cuts beyond 10,000 characters" in lines[0], (code, lines)
    assert 0 < peak_kb < PEAK_LIMIT_KB, peak_kb
    assert entries(tmp_path / "runs") == []


def _captioned(src, dst, captions, *, as_bytes=False):
    z = dict(np.load(src))
    z["captions"] = np.char.encode(np.array(captions), "utf-8") if as_bytes else np.array(captions)
    np.savez_compressed(dst, **z)
    return dst


def test_one_huge_npz_caption_is_refused_from_the_header(tmp_path, t2i):
    """64 records, one caption of 5 million characters: a <U5000000 array of 1.3 GB once loaded."""
    records = digits_records(tmp_path, n=64)
    caps = [f"a digit {i}" for i in range(64)]
    caps[7] = "x" * 5_000_000
    members = _captioned(records[0], tmp_path / "huge.npz", caps)
    nonmembers = _captioned(records[1], tmp_path / "fine.npz", [f"a digit {i}" for i in range(64)])
    code, lines, peak_kb = _measured_attack(t2i, members, nonmembers, tmp_path / "runs")
    assert code == 2 and len(lines) == 1, (code, lines)
    assert str(members) in lines[0] and f"up to 5,000,000 characters; a caption is limited to {LIMIT}" in lines[0]
    assert 0 < peak_kb < PEAK_LIMIT_KB, peak_kb
    print(f"peak resident memory refusing a 5-million-character .npz caption: {peak_kb / 1024:.0f} MB")
    assert entries(tmp_path / "runs") == []


def test_npz_byte_captions_are_bounded_too(tmp_path, t2i):
    caps = [f"a digit {i}" for i in range(8)]
    caps[2] = "é" * 10_001  # 20,002 UTF-8 bytes: within the header's bound, over the caption limit once decoded
    members = _captioned(t2i["members"], tmp_path / "m.npz", caps, as_bytes=True)
    r = attack_model(t2i["pipe"], members, t2i["nonmembers"], tmp_path / "runs")
    assert_one_line(r, 2, f"caption 2: 10,001 characters; a caption is limited to {LIMIT}")
    assert entries(tmp_path / "runs") == []


def test_metadata_jsonl_captions_have_the_same_limit(tmp_path, t2i):
    """Refused like an .npz caption, never cut silently."""
    from PIL import Image

    folder = tmp_path / "members"
    folder.mkdir()
    x = np.load(t2i["members"])["images"]
    lines = []
    for i, img in enumerate(x):
        Image.fromarray(((img[0] + 1) * 127.5).round().astype(np.uint8)).save(folder / f"{i}.png")
        lines.append(json.dumps({"file_name": f"{i}.png", "text": "y" * 10_001 if i == 3 else f"a digit {i}"}))
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    r = attack_model(t2i["pipe"], folder, t2i["nonmembers"], tmp_path / "runs")
    assert_one_line(r, 2, f"metadata.jsonl:4: text: 10,001 characters; a caption is limited to {LIMIT}")
    assert entries(tmp_path / "runs") == []


def test_captions_within_the_limit_still_attack(tmp_path, t2i):
    caps = [f"a digit {i}" for i in range(8)]
    caps[0] = "z" * 10_000
    members = _captioned(t2i["members"], tmp_path / "m.npz", caps)
    r = attack_model(t2i["pipe"], members, t2i["nonmembers"], tmp_path / "runs")
    assert r.code == 0, r
