"""Member / non-member splits and federated client splits, reproducible from the seed.

The member split follows the setting of one-run auditing (Steinke et al. 2023) as closely as a fixed
size allows: a seeded random permutation of the dataset; the first ``n_members`` are members, the next
``n_nonmembers`` non-members, the rest unused. (Exact sizes mean inclusion is not an independent fair coin
per record; audit.py states that gap.)
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from ..core.config import register_section, setting
from ..core.errors import BadInput

#: The config section that holds the client split (stable keys ``pfdm.n_clients`` etc., named after the method that
#: introduced it). Every method has a client split: FID's majority/minority reference sets come from client K's.
CLIENT_SECTION = "pfdm"


@dataclass
class ClientSplitConfig:
    n_clients: int = setting(4, lo=1, help="number of clients the members are split over")
    majority_classes: int = setting(2, lo=1, help="majority classes per client (client m: m*k .. m*k+k-1 mod "
                                                  "n_classes)")
    imbalance: float = setting(10.0, lo=1.0, help="majority:minority records-per-class ratio inside a client")


register_section(CLIENT_SECTION, ClientSplitConfig, presets={"paper": {"n_clients": 10}})


def client_settings(cfg) -> ClientSplitConfig:
    """The client-split settings of a config."""
    return getattr(cfg, CLIENT_SECTION)


@dataclass
class MemberSplit:
    members: list[int]
    nonmembers: list[int]
    seed: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(s: str) -> "MemberSplit":
        return MemberSplit(**json.loads(s))


def member_split(n_total: int, n_members: int, n_nonmembers: int, seed: int) -> MemberSplit:
    if n_members + n_nonmembers > n_total:
        raise BadInput(
            f"data.n_members + data.n_nonmembers = {n_members + n_nonmembers} exceeds the dataset's {n_total} records"
        )
    rng = np.random.default_rng([seed, 0x5EED])
    perm = rng.permutation(n_total)
    return MemberSplit(sorted(perm[:n_members].tolist()),
                       sorted(perm[n_members:n_members + n_nonmembers].tolist()), seed)


@dataclass
class ClientSplit:
    """clients[m] = dataset indices held by client m; majority[m] = its majority classes."""
    clients: list[list[int]]
    majority: list[list[int]]
    minority: list[list[int]]
    seed: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(s: str) -> "ClientSplit":
        return ClientSplit(**json.loads(s))


def client_split(indices: list[int], labels: np.ndarray, n_clients: int, n_classes: int,
                 majority_classes: int, imbalance: float, seed: int) -> ClientSplit:
    """Split member ``indices`` over clients with majority / minority classes (docs/methods.md §0).

    Client m's majority classes are {m·k, …, m·k+k−1} mod n_classes (k = majority_classes); every other
    class is a minority class. Each class's records are shared among the clients with weight ``imbalance``
    for clients holding it as majority and 1 for the others, so a client holds ``imbalance``× more records
    of each majority class than of each minority class. Every member goes to exactly one client.
    """
    if n_clients < 1:
        raise BadInput("pfdm.n_clients must be >= 1")
    if majority_classes >= n_classes:
        raise BadInput(f"pfdm.majority_classes must be < the {n_classes} classes of the dataset")
    rng = np.random.default_rng([seed, 0xC11E])
    majority = [sorted({(m * majority_classes + j) % n_classes for j in range(majority_classes)})
                for m in range(n_clients)]
    minority = [[c for c in range(n_classes) if c not in majority[m]] for m in range(n_clients)]
    clients: list[list[int]] = [[] for _ in range(n_clients)]
    idx = np.asarray(indices)
    lab = labels[idx]
    for c in range(n_classes):
        pool = idx[lab == c]
        pool = pool[rng.permutation(len(pool))]
        w = np.array([imbalance if c in majority[m] else 1.0 for m in range(n_clients)])
        # largest-remainder apportionment of the class's records by weight
        share = w / w.sum() * len(pool)
        counts = np.floor(share).astype(int)
        rem = len(pool) - counts.sum()
        order = np.argsort(-(share - counts), kind="stable")
        counts[order[:rem]] += 1
        start = 0
        for m in range(n_clients):
            clients[m].extend(pool[start:start + counts[m]].tolist())
            start += counts[m]
    return ClientSplit([sorted(c) for c in clients], majority, minority, seed)


def class_matched(members: list[int], nonmembers: list[int], labels: np.ndarray, seed: int) -> list[int]:
    """Non-members with the class counts of ``members`` (as far as each class has enough), seeded.

    The membership game of a model trained on one client's records: its members are mostly the client's
    majority classes, so unmatched non-members would let an attack score "is this a majority class" instead of
    membership. Where a class has fewer non-members than members, all of that class are taken."""
    rng = np.random.default_rng([seed, 0xC1A5])
    mem_lab = labels[np.asarray(members, dtype=np.int64)]
    non = np.asarray(nonmembers, dtype=np.int64)
    non_lab = labels[non]
    out: list[int] = []
    for c in np.unique(mem_lab):
        pool = non[non_lab == c]
        k = min(int((mem_lab == c).sum()), len(pool))
        out.extend(pool[rng.permutation(len(pool))[:k]].tolist())
    return sorted(out)
