"""Two plug-in attacks for the Ray executor's test (loaded with PRIVBENCH_PLUGINS=ray_test_attacks, so the Ray
workers register them too): ``boom`` always raises; ``flaky`` raises on its first attempt in a run directory and
then works as the loss attack."""
from __future__ import annotations

from pathlib import Path

from privbench.attacks.loss import LossAttack
from privbench.core.registry import ATTACKS


@ATTACKS.register_class
class BoomAttack(LossAttack):
    name = "boom"
    description = "test plug-in: always raises"

    def run(self, target, records, env=None):
        del target, records, env  # part of the Attack.run interface; this test attack fails before reading them
        raise RuntimeError("boom: this test attack always fails")


@ATTACKS.register_class
class FlakyAttack(LossAttack):
    name = "flaky"
    description = "test plug-in: fails once per run directory, then the loss attack"

    def run(self, target, records, env=None):
        marker = Path(env.method.ctx.run_dir) / ".flaky-tried"
        if not marker.exists():
            marker.write_text("1")
            raise RuntimeError("flaky: first attempt fails")
        return super().run(target, records, env)
