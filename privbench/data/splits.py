"""Member / non-member splits and federated client splits, reproducible from the seed (docs/methods.md §0).

The member split is as close to one-run auditing's independent fair coins as a fixed size allows (the gap:
docs/accountants.md §3.3).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ..core.config import register_section, setting
from ..core.errors import BadInput

#: The config section of the client split, in every method (FID's majority/minority reference sets come from client
#: K's); hashed inside the ``pfdm`` mapping, which names the run directories of pfdm, feddm and local.
CLIENT_SECTION = "clients"


@dataclass
class ClientSplitConfig:
    n_clients: int = setting(4, lo=1, help="number of clients the members are split over")
    majority_classes: int = setting(2, lo=1, help="majority classes per client (client m: m*k .. m*k+k-1 mod "
                                                  "n_classes)")
    imbalance: float = setting(10.0, lo=1.0, help="majority:minority records-per-class ratio inside a client")


register_section(CLIENT_SECTION, ClientSplitConfig, presets={"paper": {"n_clients": 10}}, hashed_under="pfdm")


def client_settings(cfg) -> ClientSplitConfig:
    """The client-split settings of a config."""
    return getattr(cfg, CLIENT_SECTION)


def config_client_split(cfg, members: list[int], labels: np.ndarray, n_classes: int) -> ClientSplit:
    """:func:`client_split` of ``members`` with the config's ``clients.*`` settings and seed."""
    p = client_settings(cfg)
    return client_split(members, labels, p.n_clients, n_classes, p.majority_classes, p.imbalance, cfg.seed)


@dataclass
class MemberSplit:
    """The partition of a run's records (``split.json``): members, non-members and the public split.

    The reference pool and RMIA's population (:func:`reference_pool`) lie outside it (docs/methods.md §0)."""
    members: list[int]
    nonmembers: list[int]
    seed: int
    public: list[int] = field(default_factory=list)
    #: ``data.public``: none, pool or classes:A-B (the public classes; members come from the others)
    public_mode: str = "none"
    #: the utility test split (``data.n_test``): real records no model and no selection step ever reads
    test: list[int] = field(default_factory=list)
    #: the dataset's extractor split (:func:`reserved_split`); empty, and absent from split.json, when none
    reserved: list[int] = field(default_factory=list)

    def to_json(self) -> str:
        d = asdict(self)
        d["sizes"] = {"members": len(self.members), "nonmembers": len(self.nonmembers), "public": len(self.public),
                      "test": len(self.test)}
        if self.reserved:
            d["sizes"]["reserved"] = len(self.reserved)
        else:
            del d["reserved"]
        d["sha256"] = self.content_hash()
        return json.dumps(d)

    def content_hash(self) -> str:
        """sha256 of the index lists (what a consumer trains or evaluates on, and what none may read)."""
        lists = [self.members, self.nonmembers, self.public]
        lists += [self.test] if self.test or self.reserved else []
        lists += [self.reserved] if self.reserved else []
        return hashlib.sha256(json.dumps(lists).encode()).hexdigest()

    @staticmethod
    def from_json(s: str) -> "MemberSplit":
        """The split ``to_json`` wrote; BadInput when the text is not one."""
        try:
            d = json.loads(s)
            d.pop("sizes", None)
            d.pop("sha256", None)
            return MemberSplit(**d)
        except (ValueError, RecursionError, TypeError, AttributeError) as e:
            raise BadInput(f"not a readable split ({type(e).__name__})") from None


def member_split(n_total: int, n_members: int, n_nonmembers: int, seed: int) -> MemberSplit:
    return _seeded_split(np.arange(n_total), n_members, n_nonmembers, seed)


def _seeded_split(candidates: np.ndarray, n_members: int, n_nonmembers: int, seed: int, where: str = ""
                  ) -> MemberSplit:
    """Members and non-members: the first records of a seeded permutation of ``candidates`` (``where``: for errors)."""
    if n_members + n_nonmembers > len(candidates):
        raise BadInput(f"data.n_members + data.n_nonmembers = {n_members + n_nonmembers} exceeds the dataset's "
                       f"{len(candidates)} records{where}")
    perm = candidates[np.random.default_rng([seed, 0x5EED]).permutation(len(candidates))]
    return MemberSplit(sorted(perm[:n_members].tolist()),
                       sorted(perm[n_members:n_members + n_nonmembers].tolist()), seed)


#: the seeded streams of the public split and of the reference pool (a seed draws the same records in every run)
_PUBLIC_STREAM = 0x9B11C
_POOL_STREAM = 0x9001
#: the extractor split's stream, never a run's seed: one cached extractor serves every run of a dataset
_EXTRACTOR_STREAM = 0xE7AC7


def reserved_split(labels: np.ndarray, per_class: int, name: str = "") -> list[int]:
    """A dataset's extractor split: ``per_class`` records of each class, sorted, fixed by the labels alone (a colour
    variant reserves the same records); [] when ``per_class`` is 0. ``name`` names the dataset in errors."""
    if not per_class:
        return []
    labels = np.asarray(labels)
    rng = np.random.default_rng(_EXTRACTOR_STREAM)
    out: list[int] = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        if len(idx) <= per_class:
            raise BadInput(f"dataset {name!r} reserves {per_class} records of class {int(c)} for its feature "
                           f"extractor, but the class has only {len(idx)}")
        out.extend(idx[rng.permutation(len(idx))[:per_class]].tolist())
    return sorted(out)


def public_classes(mode: str, n_classes: int | None = None) -> list[int]:
    """``classes:5-9`` → [5, 6, 7, 8, 9]; ``none``/``pool`` → []; BadInput for anything else."""
    if mode in ("none", "pool"):
        return []
    spec = mode[len("classes:"):] if mode.startswith("classes:") else None
    try:
        lo, _, hi = (spec or "").partition("-")
        classes = list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        classes = []
    if spec is None or not classes:
        raise BadInput(f"data.public={mode!r}: choose none, pool or classes:A-B (e.g. classes:5-9)")
    if n_classes is not None and (classes[0] < 0 or classes[-1] >= n_classes or len(classes) >= n_classes):
        raise BadInput(f"data.public={mode!r}: the public classes must be a proper subset of the dataset's "
                       f"classes 0-{n_classes - 1}")
    return classes


def partition(labels: np.ndarray, n_members: int, n_nonmembers: int, seed: int, public: str = "none",
              n_public: int = 0, public_owner: str = "data.n_public", n_test: int = 0,
              reserved: Sequence[int] = ()) -> MemberSplit:
    """The one allocation of a run's records from the seed: members, non-members and ``n_public`` public records
    (``public``: docs/methods.md §0).

    Under ``none``/``pool`` a public split never moves the members and non-members. ``public_owner`` names the
    setting that sized the public split in errors. ``n_test``: the next records of the members' permutation form
    the utility test split, taken before the public records; 0 = none. ``reserved``: the extractor split, left out
    of every permutation."""
    labels = np.asarray(labels)
    n_total = len(labels)
    pub_cls = public_classes(public, int(labels.max()) + 1 if n_total else None)
    held = np.zeros(n_total, dtype=bool)
    held[np.asarray(reserved, dtype=np.int64)] = True
    if not pub_cls:
        free = np.flatnonzero(~held)  # every record when the dataset declares no extractor split
        split = _seeded_split(free, n_members, n_nonmembers, seed, " outside its extractor split" if held.any() else "")
        split.reserved = sorted(np.flatnonzero(held).tolist())
        if n_test:
            split.test = _test_split(free, n_members + n_nonmembers, n_test, seed)
        if n_public:
            used = held.copy()
            used[np.asarray(split.members + split.nonmembers + split.test, dtype=np.int64)] = True
            rest = np.flatnonzero(~used)
            if n_public > len(rest):
                raise BadInput(f"public split ({public_owner}): {n_public} public records do not fit beside "
                               f"data.n_members + data.n_nonmembers = {n_members + n_nonmembers} in the dataset's "
                               f"{n_total} records; lower {public_owner} or the split sizes")
            pick = np.random.default_rng([int(seed), _PUBLIC_STREAM]).permutation(len(rest))[:n_public]
            split.public = sorted(rest[pick].tolist())
        split.public_mode = public
        return split
    is_pub = np.isin(labels, pub_cls)
    private, pub = np.flatnonzero(~is_pub & ~held), np.flatnonzero(is_pub & ~held)
    if n_members + n_nonmembers > len(private):
        raise BadInput(f"data.n_members + data.n_nonmembers = {n_members + n_nonmembers} exceeds the "
                       f"{len(private)} records of the private classes (data.public={public})")
    if n_public > len(pub):
        raise BadInput(f"data.n_public={n_public}: the public classes have only {len(pub)} records")
    perm = private[np.random.default_rng([seed, 0x5EED]).permutation(len(private))]
    chosen = pub[np.random.default_rng([int(seed), _PUBLIC_STREAM]).permutation(len(pub))[:n_public or len(pub)]]
    return MemberSplit(sorted(perm[:n_members].tolist()), sorted(perm[n_members:n_members + n_nonmembers].tolist()),
                       seed, sorted(chosen.tolist()), public,
                       _test_split(private, n_members + n_nonmembers, n_test, seed) if n_test else [],
                       sorted(np.flatnonzero(held).tolist()))


def _test_split(candidates: np.ndarray, start: int, n_test: int, seed: int) -> list[int]:
    """Records start..start+n_test of the members' seeded permutation of ``candidates``."""
    perm = candidates[np.random.default_rng([seed, 0x5EED]).permutation(len(candidates))]
    if start + n_test > len(perm):
        raise BadInput(f"data.n_test={n_test}: only {len(perm) - start} records are left beside data.n_members + "
                       f"data.n_nonmembers = {start}")
    return sorted(perm[start:start + n_test].tolist())


def reference_pool(split: MemberSplit, n_total: int, mode: str, seed: int, n_population: int = 0
                   ) -> tuple[list[int], list[int]]:
    """(reference pool, RMIA population), sorted, from a seeded permutation of the records outside the partition:
    ``offline`` takes |members ∪ non-members| of them as the pool, ``online`` the evaluation split itself; the
    population comes after the pool."""
    if mode not in ("offline", "online"):
        raise BadInput(f"attack.reference_pool={mode!r}: choose offline or online")
    evaluation = sorted(set(split.members) | set(split.nonmembers))
    used = set(evaluation) | set(split.public) | set(split.test) | set(split.reserved)
    outside = np.asarray([i for i in range(n_total) if i not in used], dtype=np.int64)
    perm = outside[np.random.default_rng([seed, _POOL_STREAM]).permutation(len(outside))]
    if mode == "online":
        pool, rest = evaluation, perm
    else:
        if len(perm) < len(evaluation):
            raise BadInput(f"attack.reference_pool=offline needs {len(evaluation)} records outside the evaluation "
                           f"split and the public split; the dataset has {len(perm)} (use attack.reference_pool="
                           f"online or smaller data.n_members/n_nonmembers/n_public)")
        pool, rest = sorted(perm[:len(evaluation)].tolist()), perm[len(evaluation):]
    if n_population and len(rest) < 1:
        raise BadInput("rmia needs population records outside the evaluation split, the public split and the "
                       "reference pool; the dataset has none left (use smaller data.n_members/n_nonmembers/n_public)")
    population = sorted(rest[:n_population].tolist()) if n_population else []
    return pool, population


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
        """The split ``to_json`` wrote; BadInput when the text is not one."""
        try:
            return ClientSplit(**json.loads(s))
        except (ValueError, RecursionError, TypeError) as e:
            raise BadInput(f"not a readable client split ({type(e).__name__})") from None


def client_split(indices: list[int], labels: np.ndarray, n_clients: int, n_classes: int,
                 majority_classes: int, imbalance: float, seed: int) -> ClientSplit:
    """Split member ``indices`` over clients with majority / minority classes (docs/methods.md §0)."""
    if n_clients < 1:
        raise BadInput("clients.n_clients must be >= 1")
    if majority_classes >= n_classes:
        raise BadInput(f"clients.majority_classes must be < the {n_classes} classes of the dataset")
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
    """Non-members with the class counts of ``members`` (all of a class that has too few), seeded.

    For a model trained on one client's records, mostly its majority classes: unmatched non-members would let an
    attack score the class instead of membership."""
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
