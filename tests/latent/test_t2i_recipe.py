"""The captions of the shipped text-to-image recipe (privbench.testing.sd, the outside models of
reports/text-to-image/) say nothing of membership: a rule that reads only the captions separates members from
held-out records no better than chance."""
from __future__ import annotations

import math

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict

from privbench.testing import sd


def _chance_band(n1: int, n0: int, z: float = 3.0) -> float:
    """z standard deviations of the AUC of a score that is independent of the labels (Mann-Whitney null)."""
    return z * math.sqrt((n1 + n0 + 1) / (12 * n1 * n0))


def _number(caption: str) -> int:
    """The record number a caption ends with ("... number one seven" → 17)."""
    tens, units = caption.split()[-2:]
    return 10 * sd.WORDS.index(tens) + sd.WORDS.index(units)


def test_caption_numbers_come_from_one_shuffled_range():
    split = sd.recipe_split()
    cm, cn = split["members"][2], split["nonmembers"][2]
    numbers = sorted(_number(c) for c in cm + cn)
    assert numbers == list(range(len(cm) + len(cn)))       # one range, every number once
    y = np.r_[np.ones(len(cm)), np.zeros(len(cn))]
    auc = roc_auc_score(y, [_number(c) for c in cm + cn])
    assert abs(auc - 0.5) < _chance_band(len(cm), len(cn)), auc


def test_a_caption_only_classifier_is_at_chance():
    """Cross-fitted logistic regression on the captions' words and record number (every caption scored out of
    fold): its AUC lies within chance of 0.5."""
    split = sd.recipe_split()
    cm, cn = split["members"][2], split["nonmembers"][2]
    captions = cm + cn
    y = np.r_[np.ones(len(cm)), np.zeros(len(cn))].astype(int)
    words = CountVectorizer(token_pattern=r"\S+").fit_transform(captions).toarray()
    feats = np.c_[words, [_number(c) / 100 for c in captions]]
    p = cross_val_predict(LogisticRegression(max_iter=1000), feats, y,
                          cv=StratifiedKFold(4, shuffle=True, random_state=0), method="predict_proba")[:, 1]
    auc = roc_auc_score(y, p)
    assert abs(auc - 0.5) < _chance_band(len(cm), len(cn)), auc
