import pytest
import torch

from privbench.core.errors import BadInput
from privbench.core.schedule import alphas_cumprod, make_scheduler, t0_to_model_t


def test_matches_diffusers_and_paper_convention():
    ac = alphas_cumprod()
    sched = make_scheduler()
    assert torch.allclose(ac.float(), sched.alphas_cumprod, rtol=1e-5)
    # model timestep t: ᾱ[t] = ∏_{k=0..t} (1 − β_k); t = 0 is the first noised level
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    assert ac[0] == pytest.approx(1 - 1e-4)
    # the paper's 1-indexed t0: ᾱ_{t0} = ∏_{s=1..t0}(1 − β_s) = alphas_cumprod[t0 − 1]
    assert float(ac[t0_to_model_t(690)]) == pytest.approx(float(torch.prod(1 - betas[:690])), rel=1e-12)
    assert float(ac[t0_to_model_t(690)]) == pytest.approx(0.008016, abs=5e-7)  # docs/accountants.md §1 table
    assert float(ac[t0_to_model_t(675)]) == pytest.approx(0.009856, abs=5e-7)
    assert t0_to_model_t(690) == 689 and t0_to_model_t(1) == 0 and t0_to_model_t(1000) == 999


@pytest.mark.parametrize("bad", [0, 1001, -3, 2.5])
def test_t0_range(bad):
    with pytest.raises(BadInput):
        t0_to_model_t(bad)

