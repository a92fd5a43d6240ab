"""The dataset pages written as static files (a report, a CI artifact): the same documents the server
answers, with the videos and reward curves of the first few episodes beside each page.

Layout of the output folder::

    index.html                              the listing
    d/<id>/index.html                       each dataset's page
    d/<id>/episode/<n>.webm                 the first ``videos`` episodes that have frames (until one has none)
    d/<id>/episode/<n>/rewards.svg          their reward curves
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vcollect.errors import EncoderUnavailableError
from vcollect.view.routes import ViewApp
from vcollect.view.summaries import VerifyReport, listing_groups, verify_report

__all__ = ["StaticSite", "write_static"]


@dataclass
class StaticSite:
    """What ``write_static`` wrote.

    Attributes:
        pages: The HTML files, the listing first.
        videos: The video files.
        notes: Datasets left without videos, and why (one line each).
    """

    pages: list[Path] = field(default_factory=list)
    videos: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def write_static(app: ViewApp, out_dir: Path, *, dataset_ids: Sequence[str] | None = None, videos: int = 3,
                 verify: bool = False) -> StaticSite:
    """Write the listing and dataset pages of ``app``'s root into ``out_dir`` (made if missing).

    Args:
        app: The pages' source (its root and fps).
        out_dir: The output folder.
        dataset_ids: The datasets to write pages for (None: every readable dataset under the root).
        videos: Episodes (the first ones) given a video and a reward curve per dataset.
        verify: Run ``Dataset.verify`` on each dataset and show its report (reads every shard whole).

    Returns:
        The files written.

    Raises:
        DatasetNotFoundError: A dataset of ``dataset_ids`` is not under the root (or may not be served).
        OSError: A file cannot be written.
    """
    site = StaticSite()
    out_dir.mkdir(parents=True, exist_ok=True)
    if dataset_ids is None:
        dataset_ids = [dataset_id for group in listing_groups(app.root) for dataset_id, entry in group.datasets.items()
                       if not entry.get("broken")]
    for dataset_id in dataset_ids:
        entry = app.loaded(dataset_id)
        folder = out_dir / "d" / dataset_id
        written: list[int] = []
        note: str | None = None
        for episode_id in range(min(videos, entry.dataset.total_episodes)):
            try:
                video: bytes | str = app.video(dataset_id, episode_id, container="webm")
            except EncoderUnavailableError as exc:
                video = str(exc)
            if isinstance(video, str):
                note = f"episodes of {dataset_id} have no video: {video}"
                break
            (folder / "episode" / str(episode_id)).mkdir(parents=True, exist_ok=True)
            (folder / "episode" / f"{episode_id}.webm").write_bytes(video)
            (folder / "episode" / str(episode_id) / "rewards.svg").write_text(app.rewards_svg(dataset_id, episode_id))
            site.videos.append(folder / "episode" / f"{episode_id}.webm")
            written.append(episode_id)
        if note is not None:
            site.notes.append(note)
        report: VerifyReport | None = None
        if verify:
            with entry.lock:
                report = verify_report(entry.dataset)
        folder.mkdir(parents=True, exist_ok=True)
        page = app.dataset_html(dataset_id, verify=report, static_videos=written, video_note=note)
        (folder / "index.html").write_text(page, encoding="utf-8")
        site.pages.append(folder / "index.html")
    (out_dir / "index.html").write_text(app.listing_html(linked=set(dataset_ids)), encoding="utf-8")
    site.pages.insert(0, out_dir / "index.html")
    return site
