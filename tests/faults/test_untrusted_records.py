"""Bad records and files are bad input (exit 2, one line naming the file, nothing written); an external attack
that ends in exit 2 leaves nothing behind; library noise is one line; a closed stdout is not a failure.

Each case below must not exit 3 ("unexpected ..."), hang (a FIFO), read a file of any size, leave
``provenance.json`` and a lock behind, print multi-line warnings, or exit 3 "Broken pipe".
"""
from __future__ import annotations

import fcntl
import json
import os
import resource
import struct
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from fault_helpers import assert_one_line, cli
from untrusted_files import attack_model, digits_records, nothing_written, run_bounded, unet_folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    m, n = digits_records(root)
    return {"root": root, "m": m, "n": n, "unet": unet_folder(root / "unet")}


def _refused(r, runs, *needles):
    line = assert_one_line(r, 2)
    assert all(n in line for n in needles), line
    assert nothing_written(runs)
    return line


# ---------------------------------------------------------------------- exit 2, naming the file

def test_deeply_nested_model_config(tmp_path, world):
    model = unet_folder(tmp_path / "unet")
    (model / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _refused(attack_model(model, world["m"], world["n"], tmp_path / "runs"), tmp_path / "runs", "config.json",
             "nested too deeply")


def test_deeply_nested_result_json(tmp_path):
    res = tmp_path / "run" / "result.json"
    res.parent.mkdir()
    res.write_text('{"metrics": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _refused(cli("check", "--gates", "tiny", res), tmp_path / "none", str(res))


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims width × height 8-bit gray pixels (a decompression bomb is this, compressed)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def test_png_decompression_bomb_names_the_file(tmp_path, world):
    folder = tmp_path / "members"
    folder.mkdir()
    bomb = _png_header_only(folder / "bomb.png", 20_000, 20_000)  # 400 megapixels in 100 bytes
    runs = tmp_path / "runs"
    _refused(attack_model(world["unet"], folder, world["n"], runs), runs, str(bomb), "decompression bomb")


def test_split_with_an_object_array(tmp_path, world):
    split = tmp_path / "split.npz"
    np.savez(split, mia_train_idxs=np.array([0, 1, 2], dtype=object), mia_eval_idxs=np.array([3, 4, 5]))
    runs = tmp_path / "runs"
    r = cli("attack", "--model", world["unet"], "--split", split, "--dataset", "digits", "--attack", "loss",
            "--runs-dir", runs, "--device", "cpu")
    _refused(r, runs, str(split), "without pickle")


@pytest.mark.parametrize("byte", [b"\x00", b"\x07"])
def test_yaml_with_a_control_byte(tmp_path, byte):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"train:\n  steps: 3" + byte + b"\n")
    runs = tmp_path / "runs"
    r = cli("train", "--method", "centralized", "--preset", "test", "--config", cfg, "--runs-dir", runs)
    _refused(r, runs, str(cfg), f"#x{byte[0]:04x}")


def test_npz_of_zero_by_zero_images(tmp_path, world):
    empty = tmp_path / "empty.npz"
    np.savez(empty, images=np.zeros((8, 0, 0, 1), dtype=np.uint8))
    runs = tmp_path / "runs"
    _refused(attack_model(world["unet"], empty, world["n"], runs), runs, str(empty), "no pixels")


# ---------------------------------------------------------------------- exit 2 leaves nothing behind

def test_bad_input_found_by_the_attack_leaves_no_run_behind(tmp_path, world, monkeypatch):
    """Bad input that only the attack itself finds (e.g. memorization's "2 distinct training records"), after
    the run directory was locked: neither provenance.json nor the lock stays."""
    from privbench.attacks.loss import LossAttack
    from privbench.core.errors import BadInput

    def refuse(*_args, **_kw):  # replaces LossAttack.run
        raise BadInput("loss: found bad by the attack")
    monkeypatch.setattr(LossAttack, "run", refuse)
    runs = tmp_path / "runs"
    _refused(attack_model(world["unet"], world["m"], world["n"], runs), runs, "found bad by the attack")


def test_too_few_records_are_refused_before_the_attack(tmp_path, world):
    x = np.load(world["m"])["images"]
    one = tmp_path / "one.npz"
    np.savez(one, images=x[:1])
    runs = tmp_path / "runs"
    _refused(attack_model(world["unet"], one, world["n"], runs), runs, "at least 2 members and 2 non-members",
             "got 1 and 8")


# ---------------------------------------------------------------------- files that are not what they say, library noise

def test_a_fifo_is_refused_not_read(tmp_path, world):
    """Reading a FIFO blocks until a writer comes: a helper thread plays the writer after a while (so the test
    never hangs); the FIFO is refused without being read."""
    fifo = tmp_path / "members.npz"
    os.mkfifo(fifo)
    done = threading.Event()

    def writer():
        if not done.wait(20):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    threading.Thread(target=writer, daemon=True).start()
    runs = tmp_path / "runs"
    try:
        _refused(attack_model(world["unet"], fifo, world["n"], runs), runs, str(fifo), "not a regular file")
    finally:
        done.set()


def test_config_json_is_size_capped(tmp_path, world):
    model = unet_folder(tmp_path / "unet", edit_config=lambda c: c.update(_comment="x" * (2 << 20)))
    runs = tmp_path / "runs"
    _refused(attack_model(model, world["m"], world["n"], runs), runs, "config.json", "limited to 1048576 bytes")


@pytest.mark.parametrize("torch_format", [True, False], ids=["torch-zip", "plain-pickle"])
def test_pickle_refusal_names_the_blocked_global(tmp_path, world, torch_format):
    import torch

    class Payload:
        def __reduce__(self):
            return (open, (str(tmp_path / "PWNED"), "w"))
    ckpt = tmp_path / "ckpt.pt"
    obj = {"net_model": Payload(), "ema_model": Payload()}
    if torch_format:
        torch.save(obj, ckpt)
    else:
        import pickle
        ckpt.write_bytes(pickle.dumps(obj, protocol=4))
    runs = tmp_path / "runs"
    r = attack_model(ckpt, world["m"], world["n"], runs, "--arch", "pytorch-ddpm")
    line = _refused(r, runs, "it needs the blocked global io.open)")
    assert not (tmp_path / "PWNED").exists()
    assert line.rstrip().endswith("privbench never runs code from a checkpoint")


def test_a_failed_write_names_the_file(tmp_path, world):
    """A file-size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ) makes every write fail with EFBIG, whose
    OSError names no file: the exit-3 line names the file being written."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))
    try:
        r = attack_model(world["unet"], world["m"], world["n"], tmp_path / "runs")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    line = assert_one_line(r, 3, "File too large: ", notes=True)
    assert str(tmp_path / "runs") in line, line


def test_library_warnings_are_one_line_each(tmp_path, world):
    """torch warns in three lines about a protocol-4 pickle; it reaches stderr as one ``privbench:`` line."""
    import pickle

    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(pickle.dumps({"net_model": {}, "ema_model": {}, "x": open}, protocol=4))
    code, lines = run_bounded("attack", "--model", ckpt, "--arch", "pytorch-ddpm", "--members", world["m"],
                              "--nonmembers", world["n"], "--attack", "loss", "--runs-dir", tmp_path / "runs")
    assert code == 2, lines
    assert all(ln.startswith("privbench: ") for ln in lines), lines
    assert any(ln.startswith("privbench: warning: UserWarning: Detected pickle protocol 4") for ln in lines), lines


def test_a_closed_stdout_is_exit_0():
    """``privbench list keys | head -1`` under pipefail: the reader takes one line and closes the pipe; the
    pipe is shrunk to one page so privbench is still writing when that happens (no race)."""
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "privbench", "list", "keys"], stdout=w, stderr=subprocess.PIPE,
                            env=env)
    os.close(w)
    first = os.read(r, 200)
    os.close(r)
    _, err = proc.communicate(timeout=300)
    assert first.startswith(b"data."), first
    assert proc.returncode == 0 and err == b"", (proc.returncode, err)


def test_the_json_reader_refuses_non_objects(tmp_path):
    from privbench.core.errors import BadInput
    from privbench.core.jsonio import read_json_object

    p = tmp_path / "a.json"
    p.write_text(json.dumps([1, 2]))
    with pytest.raises(BadInput, match="expected a JSON object"):
        read_json_object(p, "--model")


def test_the_json_reader_bounds_what_it_reads(tmp_path):
    """A result or bench JSON handed over edited: over its bound, a FIFO, nested past the parser, not UTF-8 — each
    one line naming the file, nothing beyond the bound read."""
    from privbench.core.errors import BadInput
    from privbench.core.jsonio import MAX_RECORD_BYTES, read_json

    p = tmp_path / "result.json"
    p.write_text(json.dumps({"a": "x" * 100}))
    assert read_json(p, "result", MAX_RECORD_BYTES) == {"a": "x" * 100}
    with pytest.raises(BadInput, match=r"^result .*result.json: over 50 bytes"):
        read_json(p, "result", 50)
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInput, match="nested too deeply to read"):
        read_json(p, "result", MAX_RECORD_BYTES)
    p.write_bytes(b'{"a": "caf\xe9"}')
    with pytest.raises(BadInput, match="not a readable JSON file"):
        read_json(p, "result", MAX_RECORD_BYTES)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        read_json(fifo, "bench", MAX_RECORD_BYTES)
