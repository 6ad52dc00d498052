"""Extraction audit (Carlini et al., "Extracting training data from diffusion models", USENIX Security 2023,
§4–5): generate many samples and count the training records the model regenerates.

Distance: the paper's tiled ℓ2 on [0, 1] (max over tiles of the per-tile RMS difference) or the user's
TorchScript embedding. Headline ``n_extracted``: the distinct training records that are the nearest record of
some generation within δ; beside it ``n_extracted_clique``: verified medoids of greedy cliques of ≥ k
generations, with k automatic (min(10, max(2, ⌊S/2N⌋))) and refused when no clique could fire.
Details and differences from the paper: docs/attacks.md §11.
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from ..core.config import setting
from ..core.errors import BadInput
from ..core.io import sha256_file
from ..core.registry import ATTACKS
from .base import EXTRACTION, AttackEnv, AttackOutput, Records
from .memorization import SamplingAttack, network_calls, sampling_kwargs, unique_records

#: a TorchScript embedding larger than this is refused before it is read
MAX_EMBEDDING_BYTES = 2 << 30
#: the automatic clique size's range: the paper's 10 of 500 generations per prompt, and a pair at the least
CLIQUE_MAX, CLIQUE_MIN = 10, 2
CLIQUE_RULE = "min(10, max(2, floor(n_samples / (2 * distinct training records))))"
#: the most generations extract compares pairwise (a float64 n×n matrix: 3 GiB at this n)
MAX_EXTRACT_SAMPLES = 20_000


def tiles(x: torch.Tensor, tile: int) -> torch.Tensor:
    """(n, n_tiles, C·tile·tile) tiles of images on [0, 1] (the image padded by replication to a tile multiple)."""
    x = (x.float().clamp(-1, 1) + 1) / 2
    h, w = x.shape[-2:]
    ph, pw = (-h) % tile, (-w) % tile
    if ph or pw:
        x = F.pad(x, (0, pw, 0, ph), mode="replicate")
    t = F.unfold(x, kernel_size=tile, stride=tile)  # (n, C·tile², n_tiles)
    return t.transpose(1, 2)


def tiled_l2(a: torch.Tensor, b: torch.Tensor, tile: int, chunk: int = 256) -> torch.Tensor:
    """(len(a), len(b)) max over tiles of the per-tile RMS difference."""
    ta, tb = tiles(a, tile), tiles(b, tile)
    d = ta.shape[-1]
    out = torch.empty((ta.shape[0], tb.shape[0]))
    for lo in range(0, ta.shape[0], chunk):
        per_tile = torch.cdist(ta[lo:lo + chunk].transpose(0, 1), tb.transpose(0, 1))  # (n_tiles, ca, nb)
        out[lo:lo + chunk] = (per_tile / math.sqrt(d)).amax(0)
    return out


def load_embedding(path: str):
    """The user's TorchScript embedding (size-checked before reading; loading a TorchScript archive does not
    unpickle Python objects, but CALLING it runs the user's TorchScript program — only a file the user names)."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise BadInput(f"attack.extract_embedding={p!r}: no such file")
    if os.path.getsize(p) > MAX_EMBEDDING_BYTES:
        raise BadInput(f"attack.extract_embedding={p!r}: larger than {MAX_EMBEDDING_BYTES >> 30} GiB")
    try:
        return torch.jit.load(p, map_location="cpu").eval()
    except Exception as e:  # noqa: BLE001 — any failure to read it is the user's file
        raise BadInput(f"attack.extract_embedding={p!r}: not a TorchScript module ({type(e).__name__})") from None


def embedding_distance(model, a: torch.Tensor, b: torch.Tensor, batch: int = 256) -> torch.Tensor:
    def emb(x):
        with torch.no_grad():
            out = torch.cat([model(x[lo:lo + batch].float()).flatten(1) for lo in range(0, len(x), batch)])
        return F.normalize(out.double(), dim=1)
    return torch.cdist(emb(a), emb(b)).float()


def auto_clique(n_samples: int, n_records: int) -> int:
    """The automatic clique size (module doc): min(10, max(2, ⌊S / 2N⌋))."""
    return min(CLIQUE_MAX, max(CLIQUE_MIN, n_samples // (2 * max(n_records, 1))))


def _binomial_tail(n: int, p: float, k: int) -> float:
    """P[Binomial(n, p) ≥ k]."""
    if k <= 0:
        return 1.0
    if p >= 1.0:
        return 1.0 if n >= k else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    below = sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
                         + (n - i) * log_q) for i in range(min(k, n + 1)))
    return max(0.0, 1.0 - below)


def expected_clique_records(n_samples: int, n_records: int, clique: int) -> float:
    """Records a model that regenerates each of ``n_records`` equally often flags with cliques of ``clique`` among
    ``n_samples`` samples, in expectation: N · P[Binomial(S, 1/N) ≥ k]."""
    return n_records * _binomial_tail(n_samples, 1.0 / n_records, clique)


def samples_for_clique(n_records: int, clique: int) -> int:
    """The fewest samples at which :func:`expected_clique_records` reaches 1."""
    hi = max(clique, 1)
    while expected_clique_records(hi, n_records, clique) < 1:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if expected_clique_records(mid, n_records, clique) < 1 else (lo, mid)
    return hi


def clique_refusal(n_samples: int, n_records: int, clique: int, auto: bool) -> str | None:
    """Why cliques of ``clique`` cannot fire at these sizes, in one line (None: they can)."""
    expected = expected_clique_records(n_samples, n_records, clique)
    if expected >= 1:
        return None
    lower = "" if auto or clique <= CLIQUE_MIN else " or lower attack.extract_clique (0 = auto)"
    return (f"extract: attack.extract_clique={clique}{' (auto)' if auto else ''} cannot fire at these sizes: "
            f"attack.n_samples={n_samples} over {n_records} distinct training records is {n_samples / n_records:.2f} "
            f"samples per record, and a model that regenerates every record equally often flags {expected:.2g} "
            f"records in expectation; raise attack.n_samples to at least {samples_for_clique(n_records, clique)}"
            f"{lower}")


def greedy_cliques(dist: np.ndarray, delta: float, min_size: int) -> list[list[int]]:
    """Disjoint maximal cliques (size ≥ ``min_size``) of the graph dist < delta, grown greedily."""
    adj = dist < delta
    np.fill_diagonal(adj, False)
    free = np.ones(len(dist), dtype=bool)
    out = []
    for i in np.argsort(-adj.sum(1), kind="stable"):
        if not free[i]:
            continue
        members = [int(i)]
        for j in np.argsort(dist[i], kind="stable"):
            if free[j] and j != i and adj[j, members].all():
                members.append(int(j))
        if len(members) >= min_size:
            out.append(members)
            free[members] = False
    return out


@ATTACKS.register_class
class Extract(SamplingAttack):
    name = "extract"
    description = "extraction audit: generate, clique-filter near-identical generations, verify against the training set"
    kind = EXTRACTION
    report_order = 55
    threat_model = {"queries": "sampling (attack.n_samples samples)", "reference_models": 0,
                    "reference_training": "none",
                    "auxiliary_data": "the target's training records (to verify candidates); optionally the user's "
                                      "TorchScript embedding",
                    "queries_per_record": "sampler steps per sample", "source": "Carlini et al., USENIX Security 2023"}

    extract_delta: float = setting(0.1, lo=0.0, lo_open=True,
                                   help="extract: distance below which two images are near-copies (tiled L2 on "
                                        "[0,1], or embedding L2)")
    extract_clique: int = setting(0, lo=0, help="extract: clique size that flags a generation; 0 = auto: "
                                                "min(10, max(2, n_samples // (2 * distinct training records)))")
    extract_tile: int = setting(8, lo=1, help="extract: tile side of the tiled L2 distance (paper: 8 on 32x32)")
    extract_embedding: str = setting("", help="extract: a TorchScript embedding file (e.g. SSCD); empty = tiled L2")

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        if self.n_samples > MAX_EXTRACT_SAMPLES:
            raise BadInput(f"attack.n_samples={self.n_samples}: extract compares every generation with every other "
                           f"(an n×n distance matrix, {8 * self.n_samples ** 2 / 2 ** 30:.0f} GiB); at most "
                           f"{MAX_EXTRACT_SAMPLES}")
        if self.extract_clique == 1:
            raise BadInput("attack.extract_clique=1: a clique is at least 2 generations (0 = auto)")
        if self.extract_clique > self.n_samples:
            raise BadInput(f"attack.extract_clique={self.extract_clique}: more than attack.n_samples="
                           f"{self.n_samples} generations")
        if self.extract_embedding:
            load_embedding(self.extract_embedding)

    def hash_dict(self, cfg=None) -> dict:
        d = super().hash_dict(cfg)
        if self.extract_embedding:  # the embedding's content, not its path, changes the result
            d["embedding_sha256"] = sha256_file(self.extract_embedding)
        d["headline"] = "training-set count"   # n_extracted's definition: results counted otherwise are not reused
        return d

    def distance(self, a, b, embed=None) -> torch.Tensor:
        if embed is not None:
            return embedding_distance(embed, a, b)
        return tiled_l2(a, b, int(self.extract_tile))

    @torch.no_grad()
    def run(self, target, records: Records | None, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        train_x, _ = env.training_data(records)
        index = torch.as_tensor(env.train_index, dtype=torch.long) if env.train_index is not None else None
        ref, src, _ = unique_records(train_x.cpu(), index)
        if not len(ref):
            raise BadInput("extract: the target has no training records to compare its generations with")
        n_samples, auto = int(self.n_samples), not self.extract_clique
        clique = auto_clique(n_samples, len(ref)) if auto else int(self.extract_clique)
        if not self.extract_embedding and self.extract_tile > max(ref.shape[-2:]):
            raise BadInput(f"attack.extract_tile={self.extract_tile}: larger than the records' "
                           f"{ref.shape[-2]}×{ref.shape[-1]} pixels (at most {max(ref.shape[-2:])})")
        refusal = clique_refusal(n_samples, len(ref), clique, auto)
        if refusal:  # before sampling: the sizes alone decide it
            raise BadInput(refusal)
        kw = sampling_kwargs(self, env.cfg)
        samples, _ = target.sample(n_samples, None, seed=env.seed, **kw)
        samples = samples.float().clamp(-1, 1).cpu()
        embed = load_embedding(self.extract_embedding) if self.extract_embedding else None
        delta = float(self.extract_delta)
        to_train = self.distance(samples, ref, embed)
        d_nn, nn = to_train.min(1)
        # the training-set count: each record that is the nearest of some generation within δ, with its closest one
        within = torch.nonzero(d_nn < delta).flatten().tolist()
        closest: dict[int, int] = {}
        for i in within:
            r = int(nn[i])
            if r not in closest or d_nn[i] < d_nn[closest[r]]:
                closest[r] = i
        extracted = sorted(closest, key=lambda r: int(src[r]))
        cliques = greedy_cliques(self.distance(samples, samples, embed).double().numpy(), delta, clique)
        found = []
        for members in cliques:
            sub = self.distance(samples[members], samples[members], embed).sum(1)
            medoid = members[int(sub.argmin())]
            found.append({"sample": medoid, "clique_size": len(members), "nearest_record": int(src[nn[medoid]]),
                          "distance": float(d_nn[medoid]), "verified": bool(d_nn[medoid] < delta)})
        verified = [c for c in found if c["verified"]]
        clique_records = sorted({c["nearest_record"] for c in verified})
        res = AttackOutput()
        res.metrics = {"n_extracted": len(extracted), "n_extracted_clique": len(clique_records),
                       "n_candidates": len(found),
                       "filter_precision": (len(verified) / len(found)) if found else None,
                       "n_generated": int(len(samples))}
        res.figures = {"extracted_records": [int(src[r]) for r in extracted],
                       "clique_extracted_records": clique_records, "candidates": found, "delta": delta,
                       "distance": ("embedding L2 (unit-normalised)" if embed is not None else
                                    f"tiled L2: max over {self.extract_tile}x{self.extract_tile} tiles of the RMS "
                                    f"difference on [0,1]"),
                       "n_training_records": int(len(ref)), "clique_min": clique,
                       "clique_rule": CLIQUE_RULE if auto else "attack.extract_clique",
                       "expected_clique_records": expected_clique_records(n_samples, len(ref), clique),
                       "generations_within_delta_of_training": len(within),
                       "reference": "training dataset index" if index is not None else "row in the training tensor",
                       "sampling": {**kw, "network_calls_per_sample": network_calls(kw, target.num_timesteps)}}
        res.arrays = {"nearest_record": src[nn].numpy(), "distance": d_nn.double().numpy()}
        if extracted:
            shown = extracted[:8]
            imgs = torch.stack([t for r in shown for t in (samples[closest[r]], ref[r])])
            labels = [s for r in shown for s in (f"d={float(d_nn[closest[r]]):.3f}", f"#{int(src[r])}")]
            res.images["extracted"] = (imgs, labels, 8)
        return res
