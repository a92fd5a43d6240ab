"""The dataset page in a real browser: headless Chromium (Debian's) driven by Playwright, against the page
server on a temporary root of small real datasets. One browser and one server serve the whole module;
screenshots go to each test's tmp folder."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from view_datasets import (
    CARTPOLE_ID,
    CARTPOLE_LENGTHS,
    FRAMES_ID,
    FRAMES_LENGTHS,
    LOOSE_ID,
    frames_returns,
    make_view_root,
)

from vcollect.cli import main
from vcollect.view.routes import ViewApp
from vcollect.view.server import make_server

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
FPS = 10
WAIT_MS = 15_000

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM) and shutil.which("chromium") is None,
                                reason="needs Debian's chromium")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_view_root(tmp_path_factory.mktemp("datasets"))


@pytest.fixture(scope="module")
def base_url(root: Path) -> Iterator[str]:
    server = make_server(ViewApp(root, fps=FPS), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM if os.path.exists(CHROMIUM)
                                              else shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(WAIT_MS)
    try:
        yield page
        assert errors == [], f"the page's script failed: {errors}"
    finally:
        context.close()


def table_column(page: Any, column: int) -> list[str]:
    return page.eval_on_selector_all("#episode-table tbody tr", f"rows => rows.map(r => r.cells[{column}].textContent)")


def test_listing_groups_every_dataset_by_namespace(page: Any, base_url: str, tmp_path: Path) -> None:
    page.goto(base_url)
    sections = page.eval_on_selector_all("section.namespace", "s => s.map(e => e.dataset.namespace)")
    assert sections == ["", "cartpole", "pixels"]
    ids = page.eval_on_selector_all("tr.dataset", "rows => rows.map(r => r.dataset.id)")
    assert ids == [LOOSE_ID, CARTPOLE_ID, FRAMES_ID]
    cells = page.eval_on_selector(f'tr.dataset[data-id="{CARTPOLE_ID}"]', "r => [...r.cells].map(c => c.textContent)")
    assert cells[1:3] == [str(len(CARTPOLE_LENGTHS)), str(sum(CARTPOLE_LENGTHS))]
    assert cells[-1] == "ok"
    page.fill("#filter", "pixels")
    assert page.eval_on_selector_all("tr.dataset", "rows => rows.filter(r => !r.hidden).map(r => r.dataset.id)") == [FRAMES_ID]
    page.screenshot(path=str(tmp_path / "listing.png"), full_page=True)
    page.click(f"text={FRAMES_ID}")
    page.wait_for_selector("#episode-table tbody tr")
    assert page.text_content("h1") == FRAMES_ID
    assert page.url == f"{base_url}d/{FRAMES_ID}/index.html"


def test_card_shows_facts_and_histograms(page: Any, base_url: str, tmp_path: Path) -> None:
    page.goto(f"{base_url}d/{FRAMES_ID}/")
    facts = dict(zip(page.eval_on_selector_all("dl.facts dt", "e => e.map(x => x.textContent)"),
                     page.eval_on_selector_all("dl.facts dd", "e => e.map(x => x.textContent)")))
    assert facts["episodes"] == str(len(FRAMES_LENGTHS))
    assert facts["steps"] == str(sum(FRAMES_LENGTHS))
    assert facts["observation space"] == "Box(0, 255, (24, 32, 3), uint8)"
    assert facts["action space"] == "Discrete(3)"
    assert facts["author"] == "view tests"
    bars = page.eval_on_selector_all(
        "svg.lengths rect.bar", "b => b.map(r => [Number(r.dataset.low), Number(r.dataset.high), Number(r.dataset.count)])")
    counted = {length: sum(count for low, high, count in bars if low <= length < high) for length in FRAMES_LENGTHS}
    assert counted == dict.fromkeys(FRAMES_LENGTHS, 1)
    assert sum(count for _, _, count in bars) == len(FRAMES_LENGTHS)
    heights = page.eval_on_selector_all("svg.lengths rect.bar", "b => b.map(r => r.getBBox().height)")
    assert max(heights) > 0 and sorted(heights)[-len(FRAMES_LENGTHS)] == max(heights)  # three full bars, drawn
    return_bars = page.eval_on_selector_all("svg.returns rect.bar", "b => b.map(r => Number(r.dataset.count))")
    assert sum(return_bars) == len(FRAMES_LENGTHS)
    page.click("#verify-button")
    page.wait_for_selector("#verify-result p.ok")
    assert page.text_content("#verify-result") == "verified: 1 shards, 3 episodes, no problems"
    page.screenshot(path=str(tmp_path / "card.png"), full_page=True)


def test_episode_table_sorts_and_filters(page: Any, base_url: str, tmp_path: Path) -> None:
    page.goto(f"{base_url}d/{CARTPOLE_ID}/")
    page.wait_for_selector("#episode-table tbody tr")
    assert table_column(page, 0) == [str(i) for i in range(len(CARTPOLE_LENGTHS))]
    assert table_column(page, 3) == [str(100 + i) for i in range(len(CARTPOLE_LENGTHS))]  # the stored seeds
    page.click('th[data-key="length"]')  # first click: longest first; ties by episode id
    by_length = sorted(range(len(CARTPOLE_LENGTHS)), key=lambda i: (-CARTPOLE_LENGTHS[i], i))
    assert table_column(page, 0) == [str(i) for i in by_length]
    assert table_column(page, 2) == [str(CARTPOLE_LENGTHS[i]) for i in by_length]
    page.click('th[data-key="length"]')  # again: shortest first
    assert table_column(page, 2) == [str(n) for n in sorted(CARTPOLE_LENGTHS)]
    page.click('th[data-key="return"]')  # rewards of episode i are all i: returns i * length
    returns = [i * n for i, n in enumerate(CARTPOLE_LENGTHS)]
    assert [float(x) for x in table_column(page, 1)] == sorted(returns, reverse=True)
    page.click('th[data-key="seed"]')
    assert table_column(page, 3) == [str(100 + i) for i in reversed(range(len(CARTPOLE_LENGTHS)))]
    page.fill("#episode-filter", "length>=7 return<40")
    kept = [i for i, n in enumerate(CARTPOLE_LENGTHS) if n >= 7 and i * n < 40]
    assert sorted(int(x) for x in table_column(page, 0)) == kept
    assert page.text_content("#episode-count") == f"{len(kept)} of {len(CARTPOLE_LENGTHS)} episodes"
    page.fill("#episode-filter", "lenght>3")
    assert "not understood" in page.text_content("#filter-note")
    page.screenshot(path=str(tmp_path / "table.png"), full_page=True)


def test_episode_video_plays_for_its_length(page: Any, base_url: str, tmp_path: Path) -> None:
    page.goto(f"{base_url}d/{FRAMES_ID}/")
    page.click('tr[data-id="0"]')
    page.wait_for_function("() => { const v = document.getElementById('video'); return v.readyState >= 1 && isFinite(v.duration); }")
    duration = page.evaluate("document.getElementById('video').duration")
    frames = FRAMES_LENGTHS[0] + 1  # T steps: T+1 observations, each a frame
    assert abs(duration - frames / FPS) < 0.5 / FPS
    page.wait_for_function("() => document.getElementById('video').currentTime > 0.2")  # it plays
    size = page.evaluate("[document.getElementById('video').videoWidth, document.getElementById('video').videoHeight]")
    assert size[0] / size[1] == pytest.approx(32 / 24)
    page.wait_for_function("() => { const i = document.querySelector('#curve img'); return i && i.complete && i.naturalWidth > 0; }")
    assert page.text_content("#player-title") == f"episode 0: return {frames_returns()[0]:g}, {FRAMES_LENGTHS[0]} steps, seed 10"
    page.screenshot(path=str(tmp_path / "video.png"), full_page=True)
    # no image observations, so a replay: its stored steps are not CartPole's own, and the page says where they differ
    page.goto(f"{base_url}d/{CARTPOLE_ID}/")
    page.click('tr[data-id="1"]')
    page.wait_for_function("() => document.getElementById('video-note').textContent.includes("
                           "'no video of episode 1: episode 1 diverged from its replay at step 0')")


def test_static_copy_opens_from_files(page: Any, root: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert main(["view", "--root", str(root), "--static", str(out), "--videos", "1", "--fps", str(FPS)]) == 0
    page.goto((out / "index.html").as_uri())
    page.click(f"text={FRAMES_ID}")
    page.click('tr[data-id="0"]')
    page.wait_for_function("() => { const v = document.getElementById('video'); return v.readyState >= 1 && isFinite(v.duration); }")
    assert abs(page.evaluate("document.getElementById('video').duration") - (FRAMES_LENGTHS[0] + 1) / FPS) < 0.5 / FPS
    page.click('tr[data-id="1"]')  # past --videos 1: the page says so instead of a broken video
    assert "not rendered into this static copy" in page.text_content("#video-note")
    assert page.is_hidden("#video")
    page.screenshot(path=str(tmp_path / "static.png"), full_page=True)
    assert np.isclose(sum(frames_returns()), sum(float(x) for x in table_column(page, 1)))
