"""The lab's timeline from a synthetic NET-4 run: a split brain is named where it happens, the
legends stay off the data, and the roles' legend lists only the roles drawn."""

from __future__ import annotations

import pytest

from strandline.lab.timeline import SPLIT_BRAIN_GID, draw, figure, split_brains

T0 = 1_000_000.0


def view(t_s: float, broker: int, leader: int, leo: int, state: str = "up", isr: str = "1,2,3") -> dict:
    return {"time_ms": T0 + t_s * 1000, "broker": broker, "partition": 0, "state": state, "leader": leader,
            "leader_epoch": 0 if leader == 1 else 1, "isr": isr, "controller": 2, "leo": leo, "hw": leo - 5}


def net_4_views() -> list[dict]:
    """Broker 1 leads and is cut from ZooKeeper; broker 3 is elected at 4 s while 1 still says it
    leads, until 9 s, when it follows 3."""
    views = []
    for i in range(60):
        t = i / 5
        views.append(view(t, 1, 1 if t < 9 else 3, 300 * t))
        views.append(view(t, 2, 1 if t < 4.2 else 3, 300 * min(t, 4) + 300 * max(0, t - 4.2)))
        views.append(view(t, 3, 1 if t < 4 else 3, 300 * min(t, 4) + 300 * max(0, t - 4), isr="3,2" if t >= 4 else
                          "1,2,3"))
    return views


INFO = {"scenario": "NET-4", "partitions": 1, "topic": "lab", "started_ms": T0,
        "faults": [{"label": "leader 1 cut from ZooKeeper", "start_ms": T0 + 200, "end_ms": T0 + 10_000,
                    "brokers": [1]}]}
RESULT = {"lost": 3, "lost_records": [{"value": f"p0-{i}", "partition": 0, "offset": 1300 + i,
                                       "acked_ms": T0 + 4500 + i} for i in range(3)]}
VERDICT = "NET-4: expected loss of acks=1 writes acknowledged by the deposed leader: 3 lost of 3000 acknowledged " + \
          "; the last lost write was acknowledged 0.50 s after broker 3's election, within the bound " * 2


@pytest.fixture
def fig():
    import matplotlib.pyplot as plt

    f = figure(INFO, net_4_views(), RESULT, VERDICT)
    f.canvas.draw()
    yield f
    plt.close(f)


def test_split_brains_are_the_stretches_where_two_brokers_say_they_lead():
    assert split_brains(net_4_views()) == [(T0 + 4000, T0 + 9000, (1, 3))]


def test_a_clean_handover_is_no_split_brain():
    views = [view(i / 5, b, 1 if i < 20 else 3, i) for i in range(40) for b in (1, 2, 3)]
    assert split_brains(views) == []


def test_the_split_brain_is_named_over_the_time_it_lasted(fig):
    lanes = fig.axes[0]
    [label] = [t for t in lanes.texts if t.get_gid() == SPLIT_BRAIN_GID]
    assert label.get_text() == "split brain: brokers 1 and 3 both lead"
    assert label.get_position()[0] == pytest.approx((4 + 9) / 2)
    [bar] = [line for line in lanes.lines if line.get_gid() == SPLIT_BRAIN_GID]
    assert list(bar.get_xdata()) == pytest.approx([4, 9])
    # in the band above the lanes: clear of every broker's bar (rows 0-2, 0.9 high), inside the panel
    box = label.get_window_extent(fig.canvas.get_renderer()).transformed(lanes.transData.inverted())
    assert 2.45 < box.y0 and box.y1 < lanes.get_ylim()[1]


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_the_legends_are_off_the_data(fig):
    renderer = fig.canvas.get_renderer()
    panels = [ax.get_window_extent(renderer) for ax in fig.axes]
    [offsets_legend] = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    legends = [offsets_legend, *fig.legends]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert not any(_overlaps(box, panel) for panel in panels), [t.get_text() for t in legend.get_texts()]
    [verdict] = [t for t in fig.texts if t.get_text() == VERDICT]
    text_box = verdict.get_window_extent(renderer)
    assert not any(_overlaps(text_box, legend.get_window_extent(renderer)) for legend in fig.legends)
    assert not any(_overlaps(text_box, panel) for panel in panels)
    width, height = fig.canvas.get_width_height()
    for legend in legends:                                 # and inside the picture
        box = legend.get_window_extent(renderer)
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height


def test_the_roles_legend_lists_only_the_roles_drawn(fig):
    [roles, faults] = sorted(fig.legends, key=lambda lg: -lg.get_window_extent().y0)
    assert [t.get_text() for t in roles.get_texts()] == ["leader", "isr", "out-of-isr"]
    assert [t.get_text() for t in faults.get_texts()] == ["leader 1 cut from ZooKeeper"]


def test_a_run_with_a_broker_down_shows_down_in_the_legend(tmp_path):
    import matplotlib.pyplot as plt

    views = net_4_views() + [view(12.2, 2, -1, -1, state="down")]
    f = figure(INFO, views, RESULT, VERDICT)
    try:
        roles = max(f.legends, key=lambda lg: len(lg.get_texts()))
        assert [t.get_text() for t in roles.get_texts()] == ["leader", "isr", "out-of-isr", "down"]
    finally:
        plt.close(f)
    png, page = draw(tmp_path, INFO, views, RESULT, VERDICT)
    assert png.stat().st_size > 10000 and "split brain: brokers 1 and 3 both lead" in page.read_text()
