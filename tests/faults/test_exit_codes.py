"""Every failure maps to exit 2 (bad input) or 3 (the work failed) with one line on stderr and no traceback; 130 is
an interruption (Ctrl-C); 1 is a breached gate and nothing else (docs/cli.md §3). Bad input is refused before
anything is written, and nonsense values are bad input, never accepted silently."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest
from fault_helpers import TEST, assert_one_line, cli, entries, remount_readonly, snapshot, tmpfs


def _yaml(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


BAD_SETS = [
    ("model.block_out_channels=[a,b]", "expected a list of ints"),
    ("model.block_out_channels=[]", "at least 1"),
    ("model.block_out_channels=[-8,16]", "every element must be in [1, 4096]"),
    ("model.norm_num_groups=3", "must divide every level's channels"),
    ("train.batch_size=100000000000", "must be <= 65536"),
    ("diffusion.num_timesteps=10000000000", "must be <= 100000"),
    ("data.resolution=5", "divisible"),
    ("model.attention_levels=[7]", "model.attention_levels=[7]"),
    ("model.attention_levels=[0,0]", "distinct"),
    ("sample.ddim_steps=5000", "sample.ddim_steps=5000"),
    ("attack.bootstrap=1000000000000", "attack.bootstrap"),
]


@pytest.mark.parametrize("pair,needle", BAD_SETS, ids=[p for p, _ in BAD_SETS])
def test_bad_set_values_exit_2_and_write_nothing(tmp_path, pair, needle):
    r = cli("train", *TEST, "--set", pair, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, needle)
    assert entries(tmp_path / "runs") == []


def test_huge_model_is_refused_before_any_allocation(tmp_path):
    r = cli("train", *TEST, "--set", "model.block_out_channels=[4096,4096,4096]", "--set",
            "model.layers_per_block=16", "--set", "model.norm_num_groups=8", "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "parameters")
    assert entries(tmp_path / "runs") == []


def test_reversed_betas(tmp_path):
    r = cli("train", *TEST, "--set", "diffusion.beta_start=0.5", "--set", "diffusion.beta_end=0.01",
            "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "beta_start=0.5 must be < diffusion.beta_end=0.01")
    assert entries(tmp_path / "runs") == []


@pytest.mark.parametrize("text,needle", [
    ("seed: -5\n", "seed=-5"),
    ("seed: 1.9\n", "seed=1.9"),          # never silently truncated to seed 1
    ("seed: true\n", "seed=True"),
    ("seed: 100000000000000000000000\n", "seed: integer 100000000000000000000000 at line 1 is beyond"),
    ("preset: nosuch\n", "unknown preset 'nosuch'"),
    ("preset: paper\n", "differs from --preset test"),  # would only relabel test-preset values as "paper"
    ("method: [1]\n", "expected a name"),
    ("method: pfdm\n", "method: 'pfdm' differs from --method centralized"),  # never a silent switch of method
    ("train: {steps: -5}\n", ".yaml: train.steps=-5: must be >= 1"),  # names the file, not --set
    ("model: {block_out_channels: [8, 16.5]}\n", "expected a list of ints"),
])
def test_bad_yaml_values_exit_2(tmp_path, text, needle):
    r = cli("train", *TEST, "--config", _yaml(tmp_path, text), "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, needle)
    assert entries(tmp_path / "runs") == []


def test_a_config_files_seed_never_silently_replaces_a_given_seed(tmp_path):
    """--seed 0 typed out is a seed named, even though it is the default."""
    r = cli("train", *TEST, "--seed", "0", "--config", _yaml(tmp_path, "seed: 7\n"), "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "seed: 7 differs from --seed 0: two seeds named")
    assert entries(tmp_path / "runs") == []


@pytest.mark.parametrize("args,option", [
    (["train", *TEST, "--seed", "1e23"], "--seed"),
    (["train", *TEST, "--seed", str(2 ** 70)], "--seed"),
    (["account", "ldp", "--clip", "1", "--t0", "600", "--steps", "100000000000"], "--steps"),
    (["train", "--preset", "test"], "--method"),
    (["train", *TEST, "--no-such-option"], "--no-such-option"),
    (["list", "nothing"], "'nothing' is not one of"),
])
def test_click_usage_errors_exit_2(tmp_path, args, option):
    r = cli(*args, *(["--runs-dir", tmp_path / "runs"] if args[0] == "train" else []))
    line = assert_one_line(r, 2, option)  # click's usage text too is one line, naming the command's --help
    assert line.endswith(f" {args[0]}{' ldp' if args[0] == 'account' else ''} --help')"), r
    assert entries(tmp_path / "runs") == []


def test_a_group_without_its_command_still_shows_its_help():
    r = cli("account")
    assert r.code == 2 and "account [OPTIONS] COMMAND" in r.err and "ldp" in r.err, r


@pytest.mark.parametrize("n", ["0", "1000000000"])
def test_sample_n_out_of_range(tmp_path, n):
    r = cli("sample", *TEST, "--n", n, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "--n")
    assert entries(tmp_path / "runs") == []


def test_sample_out_onto_a_directory_is_refused_first(tmp_path):
    (tmp_path / "grid").mkdir()
    r = cli("sample", *TEST, "--out", tmp_path / "grid", "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "is a directory")
    assert entries(tmp_path / "runs") == [] and entries(tmp_path / "grid") == []


def test_a_thread_count_that_would_kill_the_process_is_refused(tmp_path, monkeypatch):
    """100000 threads cannot be created (libgomp): the process would die, or numpy fail to import."""
    r = cli("train", *TEST, "--threads", "100000", "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "--threads")
    monkeypatch.setenv("OMP_NUM_THREADS", "100000")
    r = cli("train", *TEST, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "$OMP_NUM_THREADS=100000: at most 1024 threads")
    assert entries(tmp_path / "runs") == []


@pytest.mark.parametrize("opt, name", [("--out", "x.png"), ("--npz", "x.npz")])
def test_sample_output_that_cannot_be_written_is_refused_first(tmp_path, opt, name):
    (tmp_path / "a_file").write_text("kept")
    r = cli("sample", *TEST, opt, tmp_path / "a_file" / name, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "is not a folder")
    assert entries(tmp_path / "runs") == [] and (tmp_path / "a_file").read_text() == "kept"


@pytest.mark.parametrize("opt, name, needle", [("--out", "grid.jpg", "ending in .png"),
                                               ("--npz", "images.txt", "ending in .npz")])
def test_sample_output_named_for_another_format_is_refused_first(tmp_path, opt, name, needle):
    r = cli("sample", *TEST, opt, tmp_path / name, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, needle)
    assert entries(tmp_path / "runs") == [] and not (tmp_path / name).exists()


# ------------------------------------------------------------------------------------------ the work failing

def test_disk_full_simulated_exits_3_and_leaves_no_temporaries(tmp_path, monkeypatch):
    import privbench.core.io as io

    real = io.save_weights

    def full(path, *a, **kw):
        real(path, *a, **kw)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("privbench.models.checkpoint.save_weights", full)
    runs = tmp_path / "runs"
    r = cli("train", *TEST, "--runs-dir", runs)
    assert_one_line(r, 3, "No space left on device")
    run_dir = next(runs.iterdir())
    assert [p for p in entries(run_dir) if "/." in "/" + p and not p.endswith(".lock")] == []
    assert not (run_dir / "train_done.json").exists() and not (run_dir / "checkpoints" / "model.state.json").exists()


def test_disk_full_on_a_small_tmpfs(tmp_path):
    """A real full disk: the 512 KB tmpfs holds the config and split but not a checkpoint (weights + optimizer
    ≈ 760 KB). Exit 3, one line; nothing that was already stored is lost; no temporary file is left."""
    with tmpfs(tmp_path / "mnt", "512k") as mnt:
        runs = mnt / "runs"
        runs.mkdir()
        (runs / "keep.txt").write_text("stored before")
        before = snapshot(runs)
        r = cli("train", *TEST, "--runs-dir", runs)
        assert_one_line(r, 3, "No space left on device")
        after = snapshot(runs)
        assert after["keep.txt"] == before["keep.txt"]
        hidden = [p for p in entries(runs) if "/." in "/" + p and not p.endswith(".lock")]
        assert hidden == [], f"temporary files left on the full disk: {hidden}"
        assert not any(p.endswith(("train_done.json", ".state.json")) for p in after)


def test_read_only_store_simulated(store, monkeypatch):
    """The run store refuses writes (EROFS): an attack that must write exits 2 before it runs; nothing changes."""
    runs, run_dir, out_dir = store
    import shutil

    shutil.rmtree(out_dir)  # not cached: the attack must write
    before = snapshot(runs)

    def refuse(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(run_dir))

    monkeypatch.setattr("privbench.runs.store.file_lock", refuse)
    r = cli("attack", *TEST, "--attack", "loss", "--runs-dir", runs)
    assert_one_line(r, 2, "Read-only file system", notes=True)
    assert snapshot(runs) == before


def test_read_only_store_on_a_tmpfs(store, tmp_path):
    """A real read-only run store: a cached attack still answers (exit 0); training a new config or running an
    uncached attack exits 2 with one line; nothing changes."""
    import shutil

    runs, run_dir, out_dir = store
    with tmpfs(tmp_path / "ro", "64m") as mnt:
        shutil.copytree(runs, mnt / "runs")
        ro = mnt / "runs"
        remount_readonly(mnt)
        before = snapshot(ro)
        r = cli("attack", *TEST, "--attack", "loss", "--runs-dir", ro)
        assert r.code == 0 and "attack cache hit" in r.err and "Traceback" not in r.err, r
        r = cli("train", *TEST, "--seed", "3", "--runs-dir", ro)
        assert_one_line(r, 2, "Read-only file system")
        r = cli("attack", *TEST, "--attack", "loss", "--set", "attack.t=150", "--runs-dir", ro)
        assert_one_line(r, 2, "Read-only file system", notes=True)  # after "cache hit" of the training
        assert snapshot(ro) == before


def test_unexpected_error_exits_3_with_one_line(tmp_path, monkeypatch):
    from privbench.models.methods.centralized import Centralized

    def boom(_self):
        raise TypeError("boom\nsecond line")

    monkeypatch.setattr(Centralized, "train", boom)
    r = cli("train", *TEST, "--runs-dir", tmp_path / "runs")
    line = assert_one_line(r, 3, "unexpected TypeError: boom second line")
    assert "PRIVBENCH_DEBUG=1" in line
    monkeypatch.setenv("PRIVBENCH_DEBUG", "1")
    r = cli("train", *TEST, "--runs-dir", tmp_path / "runs")
    assert r.code == 3 and "Traceback" in r.err and r.lines[-1].startswith("privbench: failed: unexpected TypeError")


@pytest.mark.parametrize("exc", [MemoryError(), RuntimeError("[enforce fail at alloc_cpu.cpp:127] "
                                                             "DefaultCPUAllocator: can't allocate memory: you tried "
                                                             "to allocate 800000000000 bytes")])
def test_out_of_memory_exits_3(tmp_path, monkeypatch, exc):
    from privbench.models.methods.centralized import Centralized

    def oom(_self):
        raise exc

    monkeypatch.setattr(Centralized, "train", oom)
    assert_one_line(cli("train", *TEST, "--runs-dir", tmp_path / "runs"), 3, "out of memory")


def test_keyboard_interrupt_exits_130(tmp_path, monkeypatch):
    from privbench.models.methods.centralized import Centralized

    def ctrl_c(_self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Centralized, "train", ctrl_c)
    assert_one_line(cli("train", *TEST, "--runs-dir", tmp_path / "runs"), 130, "Ctrl-C")


def test_sigint_during_training_exits_130_and_the_rerun_resumes(tmp_path):
    """A real Ctrl-C (SIGINT) in the middle of a training: exit 130, one line; the last checkpoint is intact and
    a rerun resumes from it."""
    runs = tmp_path / "runs"
    args = [sys.executable, "-m", "privbench", "train", *TEST, "--set", "train.steps=200000", "--set",
            "train.checkpoint_every=5", "--runs-dir", str(runs)]
    env = {**os.environ, "PRIVBENCH_PROGRESS": "0"}
    # a shell's background job starts with SIGINT ignored, and Python then never raises KeyboardInterrupt: give the
    # child the default disposition, as an interactive terminal would
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 600  # a guard against a hang, not an assertion on speed
        while not list(runs.glob("*/checkpoints/model.state.json")):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert p.returncode == 130, err
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("privbench: interrupted: "), err
    from privbench.models import checkpoint as ckpt

    ckpt_dir = next(runs.iterdir()) / "checkpoints"
    assert ckpt.problem(ckpt_dir, "model") is None
    step = ckpt.read_state(ckpt_dir, "model")["step"]
    assert step >= 5 and step % 5 == 0


def test_a_breach_is_the_only_exit_1(pristine, tmp_path):
    gates = tmp_path / "g.yaml"
    gates.write_text("gates: [{method: centralized, target: model, attack: loss, metric: auc, max: 0.0}]\n")
    r = cli("check", "--gates", gates, pristine[1])
    assert r.code == 1 and any(line.startswith("BREACH:") for line in r.lines), r
    gates.write_text("gates: [{method: centralized, target: model, attack: loss, metric: nosuch, max: 0.0}]\n")
    assert cli("check", "--gates", gates, pristine[1]).code == 2


def test_account_ldp_huge_steps_is_not_a_traceback():
    r = cli("account", "ldp", "--clip", "1", "--t0", "600", "--steps", "100000")
    assert r.code == 0, r


@pytest.mark.parametrize("method, key, reads", [
    ("pfdm", "dp.epsilon=1", "pfdm.*, clients.*, dp.delta, dp.noise_source"),
    ("centralized", "dp.noise_multiplier=2", "data.*, model.*, diffusion.*, train.*"),
    ("dpdm", "pfdm.t0=100", "train.*, dp.*"),
])
def test_a_key_the_method_does_not_train_from_is_refused(tmp_path, method, key, reads):
    r = cli("train", "--method", method, *TEST[2:], "--set", key, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, f"{key.split('=')[0]}: not read by method {method}; it trains from")
    assert reads in r.err
    assert entries(tmp_path / "runs") == []


@pytest.mark.parametrize("args, needle", [
    (["--slurm-partition", "gpu"], "--slurm-partition: only with --executor slurm"),
    (["--executor", "ray", "--slurm-time-cell", "5"], "--slurm-time-cell: only with --executor slurm"),
    (["--cpus-per-task", "4"], "--cpus-per-task: only with --executor ray or slurm"),
    (["--out", "a_file"], "exists and is not a folder"),
])
def test_bench_options_that_would_be_ignored_or_fail_late_are_refused_first(tmp_path, args, needle):
    (tmp_path / "a_file").write_text("kept")
    args = [str(tmp_path / a) if a == "a_file" else a for a in args]
    r = cli("bench", "--suite", "test", *args, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, needle)
    assert entries(tmp_path / "runs") == [] and (tmp_path / "a_file").read_text() == "kept"


@pytest.mark.parametrize("attack, key, needle", [
    ("memorization", "attack.n_samples=1000000000000", "must be <= 100000"),
    ("extract", "attack.n_samples=30000", "an n×n distance matrix, 7 GiB); at most 20000"),
    ("extract", "attack.extract_tile=9", "attack.extract_tile=9: larger than the records' 8×8 pixels (at most 8)"),
    ("lira", "attack.n_reference=1000000000", "must be <= 1024"),
])
def test_attack_sizes_that_would_exhaust_memory_or_disk_are_refused(tmp_path, attack, key, needle):
    r = cli("attack", *TEST, "--attack", attack, "--set", key, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, needle, notes=True)
    assert not list((tmp_path / "runs").glob("*/attacks/*"))
