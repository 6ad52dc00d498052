"""A plug-in attack for the pool executors' test (PRIVBENCH_PLUGINS=pool_test_attacks): ``crash`` kills its
process on its first attempt in a run directory (a job that dies, not one that raises), then works as loss."""
from __future__ import annotations

import os
from pathlib import Path

from privbench.attacks.loss import LossAttack
from privbench.core.registry import ATTACKS


@ATTACKS.register_class
class CrashAttack(LossAttack):
    name = "crash"
    description = "test plug-in: its first job dies, then the loss attack"

    def run(self, target, records, env=None):
        marker = Path(env.method.ctx.run_dir) / ".crash-tried"
        if not marker.exists():
            marker.write_text("1")
            os._exit(17)
        return super().run(target, records, env)
