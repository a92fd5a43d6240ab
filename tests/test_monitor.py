"""Live collection figures: exact per-env steps and mean return on a deterministic env, per-env rates from the
clock, the figures beside the CLI's progress bar, and TensorBoard scalars read back from the event file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vcollect
from tests.render_envs import WALK_ID
from vcollect.cli import main
from vcollect.monitor import RECENT_EPISODES, EpisodeTally, FiguresLog, LiveFeed


def test_figures_at_the_end_of_a_call_are_exact() -> None:
    """The test env's episodes last 12 steps and return the sum of their actions: every env's steps and the
    mean return of the last 100 episodes are known from the CollectStats."""
    log = FiguresLog()
    envs = vcollect.make_vector(WALK_ID, 4, backend="dummy")
    with vcollect.Collector(None, envs, seed=3, monitor=log) as collector:
        first = collector.collect(n_step=400, random=True, reset_before_collect=True)
        second = collector.collect(n_episode=90, random=True)
    figures = log.last
    assert figures is not None
    steps = first.n_collected_steps + second.n_collected_steps
    returns = np.concatenate([first.returns, second.returns])
    assert figures.episodes == len(returns) == first.n_collected_episodes + 90
    # n_step=400 over 4 envs: 100 each; then each env's episodes of 12 steps, less what it had run of one
    assert figures.steps == int(figures.env_steps.sum()) >= steps
    assert figures.env_steps[:].min() >= 100
    assert int(figures.env_steps.sum()) - steps == int(collector.buffer.episode_lengths.sum())
    assert figures.mean_return == pytest.approx(float(returns[-RECENT_EPISODES:].mean()))
    assert figures.elapsed > 0 and figures.steps_per_s >= 0
    assert len(log.history) >= 2  # at least one figure per call


def test_blocks_backends_feed_the_same_figures() -> None:
    log = FiguresLog()
    envs = vcollect.make_vector(WALK_ID, 3, backend="gymnasium", vectorization_mode="sync")
    with vcollect.Collector(None, envs, seed=1, monitor=[log]) as collector:
        stats = collector.collect(n_episode=12, random=True, reset_before_collect=True)
    figures = log.last
    assert figures is not None and figures.episodes >= 12 and set(stats.lens.tolist()) == {12}
    assert len(set(figures.env_steps.tolist())) == 1  # every env steps every time
    assert figures.episodes * 12 <= figures.steps < (figures.episodes + 3) * 12
    assert figures.mean_return is not None and 0 <= figures.mean_return <= 3 * 12


def test_per_env_rates_show_the_slow_env() -> None:
    """Rates come from the clock between two figures: a fake clock makes them exact."""
    tally = EpisodeTally(3)
    running = np.zeros(3, dtype=np.int64)
    now = [0.0]
    log = FiguresLog()
    feed = LiveFeed([log], tally, lambda: running, interval=0.5, clock=lambda: now[0])
    feed.begin()
    running[:] = (40, 40, 4)
    now[0] = 2.0
    feed.moved()
    first = log.last
    assert first is not None
    assert first.env_steps_per_s.tolist() == [20.0, 20.0, 2.0] and first.steps_per_s == 42.0
    assert "slowest env 2" in first.summary()
    tally.add(np.array([0, 2]), np.array([50, 10]), np.array([1.0, 3.0]))
    running[:] = (10, 60, 0)
    now[0] = 3.0
    feed.moved()
    second = log.last
    assert second is not None
    assert second.env_steps.tolist() == [60, 60, 10]
    assert second.env_steps_per_s.tolist() == [20.0, 20.0, 6.0]
    assert second.episodes == 2 and second.mean_return == 2.0
    now[0] = 3.1
    feed.moved()  # not due: 0.5 s between figures
    assert log.last is second


def test_mean_return_is_over_the_latest_hundred() -> None:
    tally = EpisodeTally(1)
    for start in range(0, 250, 7):
        batch = np.arange(start, min(start + 7, 250), dtype=np.float64)
        tally.add(np.zeros(len(batch), dtype=np.int64), np.ones(len(batch), dtype=np.int64), batch)
    assert tally.episodes == 250 and tally.finished_steps.tolist() == [250]
    assert tally.mean_return() == pytest.approx(float(np.arange(150, 250).mean()))


def test_a_monitor_without_update_is_refused() -> None:
    envs = vcollect.make_vector(WALK_ID, 2, backend="dummy")
    with pytest.raises(TypeError, match="update"):
        vcollect.Collector(None, envs, monitor=object())  # type: ignore[arg-type]
    envs.close()


def test_cli_live_and_tensorboard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    logs = tmp_path / "tb"
    # the dummy backend: the test env is registered in this process only (subprocess workers would not know it)
    status = main(["collect", WALK_ID, "--num-envs", "2", "--backend", "dummy", "--steps", "600", "--seed", "0", "--live",
                   "--tensorboard", str(logs), "--root", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 0, (out, err)
    assert "steps/s" in err and "R100" in err  # beside the progress bar (tqdm writes to stderr)
    files = list(logs.glob("events.out.tfevents.*"))
    assert len(files) == 1
    acc = event_accumulator.EventAccumulator(str(logs))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"collect/steps_per_s", "collect/episodes", "collect/mean_return_100",
            "collect/env_steps_per_s/0", "collect/env_steps_per_s/1"} <= tags
    episodes = acc.Scalars("collect/episodes")
    assert episodes[-1].step == 600 and episodes[-1].value == 600 // 12


def test_cli_tensorboard_refuses_a_file_and_ray_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["collect", WALK_ID, "--steps", "10", "--tensorboard", str(tmp_path / "file" / "tb")]) == 2
    assert "--tensorboard" in capsys.readouterr().err
    assert main(["collect", WALK_ID, "--steps", "10", "--live", "--ray-workers", "2"]) == 2
    assert "--ray-workers" in capsys.readouterr().err
