"""What the federated methods share: the ``fed`` config section, the client-split checks and client targets."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.config import register_section, setting
from ..core.errors import BadInput
from ..data.splits import client_settings, config_client_split
from .method import Method, run_partition


@dataclass
class FedConfig:
    rounds: int = setting(10, lo=1, help="FedAvg communication rounds (feddm)")
    local_steps: int = setting(100, lo=1, help="local steps per client per round (feddm)")
    local_only_steps: int = setting(1000, lo=1, help="steps of each client's full model (local)")
    prox_mu: float = setting(0.0, lo=0.0, help="FedProx proximal weight mu (feddm); 0 = plain FedAvg")


register_section("fed", FedConfig, presets={
    "test": {"rounds": 2, "local_steps": 5, "local_only_steps": 10},
    "small": {"rounds": 25, "local_steps": 400, "local_only_steps": 10000},
    "paper": {"rounds": 100, "local_steps": 1000, "local_only_steps": 100_000}})


def parse_client_target(name: str, prefix: str) -> int | None:
    """``client:3`` with prefix ``client`` → 3; None when ``name`` is not of that form."""
    if name.startswith(prefix + ":"):
        try:
            return int(name.split(":", 1)[1])
        except ValueError:
            return None
    return None


class FederatedMethod(Method):
    """A method over the client split: checks that every client gets records; ``client:K`` targets (models
    trained on client K's records only) are attacked on client K's records vs class-matched non-members."""

    def validate(self) -> None:
        """The client split is possible and gives every client at least one record (computed without writing)."""
        cfg, ctx = self.cfg, self.ctx
        p, nc = client_settings(cfg), ctx.info.num_classes
        if p.majority_classes >= nc:
            raise BadInput(f"clients.majority_classes={p.majority_classes}: must be < the {nc} classes of {cfg.dataset}")
        if p.n_clients > cfg.data.n_members:
            raise BadInput(f"clients.n_clients={p.n_clients}: more clients than the {cfg.data.n_members} members")
        labels = ctx.dataset[1].numpy()
        split = run_partition(cfg, labels)
        cs = config_client_split(cfg, split.members, labels, nc)
        empty = [m for m, c in enumerate(cs.clients) if not c]
        if empty:
            raise BadInput(f"clients.n_clients={p.n_clients}: clients {empty} get no records from the "
                           f"{cfg.data.n_members} members; use fewer clients or more data.n_members")

    @property
    def n_clients(self) -> int:
        return int(client_settings(self.cfg).n_clients)

    def attack_split(self, target: str) -> tuple[list[int], list[int]]:
        target = self.check_target(target)
        k = parse_client_target(target, self.target_kind(target)) if ":" in target else None
        if k is None:
            return super().attack_split(target)
        return self.client_attack_split(k)

    def fid_target(self, client: int) -> str:
        names = self.target_names()
        for kind in self.target_order:
            if f"{kind}:{client}" in names:
                return f"{kind}:{client}"
        return self.default_target
