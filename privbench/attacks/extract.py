"""Extraction audit (Carlini et al., "Extracting training data from diffusion models", USENIX Security 2023,
§4–5): generate many samples, flag the ones the model generates over and over (the clique filter), and verify each
flagged generation against the training set — which training records can the model regenerate?

1. **Generate** ``attack.n_samples`` samples with ``attack.sampler``/``attack.steps`` (the memorization
   attack's sampling settings; class-conditional targets: labels drawn uniformly, seeded).
2. **Distance** between two images: Carlini et al.'s tiled ℓ2 for CIFAR-10 — the images on the [0, 1] scale are cut
   into non-overlapping ``attack.extract_tile`` × ``attack.extract_tile`` tiles and the distance is the MAXIMUM over
   tiles of the per-tile root-mean-square difference (two images are near-copies only if every region matches);
   or, with ``attack.extract_embedding`` (``--embedding FILE``), the ℓ2 distance between the unit-normalised outputs
   of the user's TorchScript embedding (e.g. an SSCD copy-detection model; privbench never downloads one).
3. **Clique filter**: a graph on the samples with an edge where the distance is below ``attack.extract_delta``;
   a generation is a candidate when it lies in a clique of at least ``attack.extract_clique`` samples (the paper:
   10 of 500 generations per prompt). Cliques are grown greedily (each node in order of degree, adding the
   neighbours adjacent to every member, nearest first): a maximal clique, not necessarily the maximum one.
   The candidate of a clique is its medoid.
4. **Verify** each candidate against the target's training records (duplicates collapsed): extracted when its
   nearest training record is within the same δ. Reported per record: dataset index, distance, clique size.

Metrics: ``n_extracted`` (distinct training records verified), ``n_candidates``, ``filter_precision``
(verified ÷ candidates; n/a without candidates), ``n_generated``; figures: every candidate with its nearest
record and distance, and how many generations (filtered or not) lie within δ of a training record.

Conventions that differ from the paper: Carlini et al. verify CIFAR-10 generations with a distance RELATIVE to the
50 nearest training images (α = 0.5); privbench uses the absolute tiled distance for both steps (one δ). Stable
Diffusion's prompts (500 generations per caption) are replaced by unconditional or uniformly-labelled sampling.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core.config import setting
from ..core.errors import BadInput
from ..core.io import sha256_file
from ..core.registry import ATTACKS
from .base import EXTRACTION, Attack, AttackEnv, AttackOutput, Records
from .memorization import SamplingSettings, check_sampling, network_calls, sampling_kwargs, unique_records

#: a TorchScript embedding larger than this is refused before it is read
MAX_EMBEDDING_BYTES = 2 << 30


@dataclass
class ExtractSettings(SamplingSettings):
    n_samples: int = setting(500, lo=1, help="samples drawn by memorization")
    extract_delta: float = setting(0.1, lo=0.0, lo_open=True,
                                   help="extract: distance below which two images are near-copies (tiled L2 on "
                                        "[0,1], or embedding L2)")
    extract_clique: int = setting(10, lo=2, help="extract: clique size that flags a generation (paper: 10 of 500)")
    extract_tile: int = setting(8, lo=1, help="extract: tile side of the tiled L2 distance (paper: 8 on 32x32)")
    extract_embedding: str = setting("", help="extract: a TorchScript embedding file (e.g. SSCD); empty = tiled L2")


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
class Extract(Attack):
    name = "extract"
    description = "extraction audit: generate, clique-filter near-identical generations, verify against the training set"
    kind = EXTRACTION
    report_order = 55
    Settings = ExtractSettings
    settings_presets = {"test": {"n_samples": 32}, "paper": {"n_samples": 10_000}}
    extra_config_keys = ("sample.sampler", "sample.ddim_steps", "sample.batch_size")
    threat_model = {"queries": "sampling (attack.n_samples samples)", "reference_models": 0,
                    "reference_training": "none",
                    "auxiliary_data": "the target's training records (to verify candidates); optionally the user's "
                                      "TorchScript embedding",
                    "queries_per_record": "sampler steps per sample"}

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        check_sampling(self, num_timesteps)
        if self.extract_clique > self.n_samples:
            raise BadInput(f"attack.extract_clique={self.extract_clique}: more than attack.n_samples="
                           f"{self.n_samples} generations")
        if self.extract_embedding:
            load_embedding(self.extract_embedding)

    def hash_dict(self, cfg=None) -> dict:
        d = super().hash_dict(cfg)
        if self.extract_embedding:  # the embedding's content, not its path, changes the result
            d["embedding_sha256"] = sha256_file(self.extract_embedding)
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
        kw = sampling_kwargs(self, env.cfg)
        samples, _ = target.sample(int(self.n_samples), None, seed=env.seed, **kw)
        samples = samples.float().clamp(-1, 1).cpu()
        embed = load_embedding(self.extract_embedding) if self.extract_embedding else None
        delta = float(self.extract_delta)
        cliques = greedy_cliques(self.distance(samples, samples, embed).double().numpy(), delta,
                                 int(self.extract_clique))
        to_train = self.distance(samples, ref, embed)
        d_nn, nn = to_train.min(1)
        found = []
        for members in cliques:
            sub = self.distance(samples[members], samples[members], embed).sum(1)
            medoid = members[int(sub.argmin())]
            found.append({"sample": medoid, "clique_size": len(members), "nearest_record": int(src[nn[medoid]]),
                          "distance": float(d_nn[medoid]), "verified": bool(d_nn[medoid] < delta)})
        verified = [c for c in found if c["verified"]]
        records_out = sorted({c["nearest_record"] for c in verified})
        res = AttackOutput()
        res.metrics = {"n_extracted": len(records_out), "n_candidates": len(found),
                       "filter_precision": (len(verified) / len(found)) if found else None,
                       "n_generated": int(len(samples))}
        res.figures = {"extracted_records": records_out, "candidates": found, "delta": delta,
                       "distance": ("embedding L2 (unit-normalised)" if embed is not None else
                                    f"tiled L2: max over {self.extract_tile}x{self.extract_tile} tiles of the RMS "
                                    f"difference on [0,1]"),
                       "clique_min": int(self.extract_clique),
                       "generations_within_delta_of_training": int((d_nn < delta).sum()),
                       "reference": "training dataset index" if index is not None else "row in the training tensor",
                       "sampling": {**kw, "network_calls_per_sample": network_calls(kw, target.num_timesteps)}}
        res.arrays = {"nearest_record": src[nn].numpy(), "distance": d_nn.double().numpy()}
        if verified:
            pick = [c["sample"] for c in verified[:8]]
            rows = [int((src == c["nearest_record"]).nonzero()[0, 0]) for c in verified[:8]]
            imgs = torch.stack([t for pair in zip(samples[pick], ref[rows]) for t in pair])
            labels = [s for c in verified[:8] for s in (f"d={c['distance']:.3f}", f"#{c['nearest_record']}")]
            res.images["extracted"] = (imgs, labels, 8)
        return res
