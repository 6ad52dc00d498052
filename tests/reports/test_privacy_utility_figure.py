"""The privacy–utility figure (reports/privacy_utility_figure.py) as a paper prints it: one file per panel for
\\columnwidth and a grid for \\textwidth, type of at least 7 pt, FID on a log axis, a chance line, one interval kind
per band and a caption that names each kind it draws; the same numbers give the same bytes."""
from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.text import Text
from test_privacy_utility import _bench

from privbench.reports.privacy_utility import privacy_utility_frame, summary_frame
from privbench.reports.privacy_utility_figure import (
    COLUMN_WIDTH,
    FONT,
    PANELS,
    TEXT_WIDTH,
    caption,
    grid_figure,
    panel_figure,
    write_figures,
)


@pytest.fixture
def summary(tmp_path):
    bench, results = _bench(tmp_path)
    return summary_frame(privacy_utility_frame(results, bench))


def _drawn(fig):
    FigureCanvasAgg(fig).draw()
    return fig


def _texts(fig):
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("col", [None] + [c for c, _ in PANELS])
def test_every_file_fits_its_width_with_type_of_at_least_7pt(summary, col):
    fig = _drawn(grid_figure(summary) if col is None else panel_figure(summary, col))
    assert fig.get_size_inches()[0] == (TEXT_WIDTH if col is None else COLUMN_WIDTH)
    small = [(t.get_text(), t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < FONT]
    assert not small, small
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())  # inches: everything drawn, legends included
    assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01, drawn  # no label or legend entry runs off the page
    assert drawn.x1 <= fig.get_size_inches()[0] + 0.01 and drawn.y1 <= fig.get_size_inches()[1] + 0.01, drawn


def test_fid_is_on_a_log_axis_and_accuracy_has_the_chance_line(summary):
    fig = _drawn(grid_figure(summary))
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert axes["FID (overall) ↓"].get_yscale() == "log" and axes["best attack AUC"].get_yscale() == "linear"
    chance = [ln for ln in axes["downstream accuracy ↑"].get_lines() if ln.get_label().startswith("chance")]
    assert len(chance) == 1 and chance[0].get_label() == "chance (1/10 classes)"
    assert list(chance[0].get_ydata()) == [0.1, 0.1]


def test_a_band_is_one_interval_kind_and_the_caption_names_it(summary):
    """pfdm has one seed at each ε: a solid band (bootstrap). dpdm-lora has two seeds at ε = 10 only: its points
    differ in kind, so they carry error bars (capped over seeds, plain bootstrap) and no band joins them."""
    ax = _drawn(panel_figure(summary, "downstream_accuracy")).axes[0]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1 and not bands[0].get_hatch()  # pfdm's; dpdm-lora has none
    text = caption(summary)
    assert "Solid band: 95 % bootstrap CI of the single run" in text and "Hatched band" not in text
    assert "Error bars" in text and "capped, 95 % CI of the mean over seeds" in text
    # every point of a line over several seeds: a hatched band, and the caption says so
    seeds = summary.copy()
    for col, _ in PANELS:
        seeds[f"{col}_interval"] = seeds[f"{col}_interval"].replace("bootstrap", "seeds")
    ax = _drawn(panel_figure(seeds, "downstream_accuracy")).axes[0]
    assert any(c.get_hatch() for c in ax.collections if isinstance(c, PolyCollection))
    assert "Hatched band: 95 % CI of the mean over seeds" in caption(seeds)


def test_one_file_per_panel_and_the_grid_same_bytes_for_the_same_numbers(summary, tmp_path):
    a = write_figures(summary, tmp_path / "a")
    b = write_figures(summary, tmp_path / "b")
    assert [p.name for p in a] == [p.name for p in b]
    assert {p.stem for p in a} == {"privacy_utility"} | {f"privacy_utility-{c}" for c, _ in PANELS}
    for pa, pb in zip(a, b):
        assert pa.read_bytes() == pb.read_bytes(), pa.name
    svg = (tmp_path / "a" / "figures" / "privacy_utility-fid.svg").read_text()
    assert 'width="237.6pt"' in svg  # 3.3 in: \columnwidth
