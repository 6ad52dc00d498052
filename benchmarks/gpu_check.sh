#!/usr/bin/env bash
# The GPU check: one prepared run, under 8 minutes on one GPU, no download.
#
# Trains the paper preset's 35.7M-parameter UNet for a fixed number of steps in fp32 and in bf16 (on a seeded
# random tensor dataset of CIFAR-10's shape), times one DP-SGD step against a non-private one, runs PIA and
# SecMI on a few thousand records, and prints step time, images/s, attack records/s, peak memory, the
# training-loop and attack ratios, each training run's achieved FLOP rate ÷ the bound of its precision (the best
# matmul/convolution rate measured in the same run; benchmarks/train_throughput.py prints the same ratio on CPU),
# and PIA in bf16 at batch 256 against the bf16 matmul bound. Details: benchmarks/gpu_check.py.
#
#   bash benchmarks/gpu_check.sh                                # paper preset on cuda
#   bash benchmarks/gpu_check.sh --preset test --device cpu     # dry run on CPU (seconds)
#   bash benchmarks/gpu_check.sh --steps 100 --records 2048     # shorter
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PRIVBENCH_PROGRESS="${PRIVBENCH_PROGRESS:-0}"
exec timeout "${GPU_CHECK_TIMEOUT:-900}" "$PY" benchmarks/gpu_check.py "$@"
