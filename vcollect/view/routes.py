"""The page's answers: a request's path to a response, over a datasets root, with what is costly cached.

``ViewApp`` knows nothing of sockets: the HTTP server (server.py) and the static writer (static_site.py)
both ask it for the same documents. Paths it answers (GET or HEAD)::

    /  or /index.html                         the listing of every dataset under the root
    /d/<id>/  or /d/<id>/index.html           a dataset's page
    /d/<id>/verify.json                       Dataset.verify's problems (reads every shard: on request)
    /d/<id>/episode/<n>.webm | .mp4 [?fps=F]  an episode's video
    /d/<id>/episode/<n>/rewards.svg           an episode's reward curve

A loaded dataset is kept (a few at once) while its dataset.json, shards/ and manifest/ are unchanged, so
the page, its videos and its verify share one load; encoded videos are kept up to a byte budget.

An episode's video is its frames from ``Dataset.render_episode`` (its stored image observations, or a replay
checked against what is stored) encoded by ``vcollect.render``'s writer; an episode without frames is a 404
whose text is the renderer's reason (no env spec, no seed, a divergence, an env that cannot be made here).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from vcollect.errors import (
    DatasetError,
    DatasetNotFoundError,
    EncoderUnavailableError,
    EnvSpecNotStoredError,
    EnvUnavailableError,
    EpisodeNotSeededError,
    NoImageObservationsError,
    ReplayDivergenceError,
)
from vcollect.render.video import MEDIA_TYPES, encode_video, require_encoder
from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR
from vcollect.store.layout.manifest import MANIFEST_DIR
from vcollect.store.read.reader import Dataset
from vcollect.view.charts import line_svg
from vcollect.view.pages import dataset_page, index_page
from vcollect.view.paths import locate_served
from vcollect.view.summaries import (
    DatasetCard,
    dataset_card,
    episode_rewards,
    listing_groups,
    open_for_view,
    verify_report,
)

__all__ = ["DEFAULT_FPS", "MAX_FPS", "MIN_VIDEO_SIDE", "NO_FRAMES", "LoadedDataset", "Response", "ViewApp"]

#: Frames per second of a video unless the request says otherwise.
DEFAULT_FPS = 30.0
#: The highest fps a request may ask for.
MAX_FPS = 240.0
#: Loaded datasets kept at once.
KEPT_DATASETS = 4
#: Bytes of encoded videos kept at once.
KEPT_VIDEO_BYTES = 64 << 20
#: Frames smaller than this on their shorter side are scaled up by a whole factor (each pixel repeated), so an
#: 84x84 Atari frame plays at 168x168, not as a stamp.
MIN_VIDEO_SIDE = 160
#: What ``Dataset.render_episode`` raises for an episode it has no frames of: the page says why (404).
NO_FRAMES = (NoImageObservationsError, EpisodeNotSeededError, EnvSpecNotStoredError, EnvUnavailableError,
             ReplayDivergenceError)

_DATASET_ROUTE = re.compile(r"^/d/(?P<id>.+?)/(?:(?P<page>index\.html)?|(?P<verify>verify\.json)|"
                            r"episode/(?P<episode>\d{1,18})(?:\.(?P<container>webm|mp4)|/(?P<rewards>rewards\.svg)))$")

_T = TypeVar("_T")


@dataclass(frozen=True)
class Response:
    """One answer: status, content type, body and extra headers."""

    status: HTTPStatus
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _text(status: HTTPStatus, message: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", (message.rstrip() + "\n").encode())


def _html(text: str) -> Response:
    return Response(HTTPStatus.OK, "text/html; charset=utf-8", text.encode(), {"Cache-Control": "no-store"})


@dataclass
class LoadedDataset:
    """A loaded dataset, its card, the state of its folder it was loaded from, and the lock its reads hold."""

    dataset: Dataset
    card: DatasetCard
    signature: tuple[int, ...]
    lock: threading.Lock = field(default_factory=threading.Lock)


def _signature(folder: Path) -> tuple[int, ...]:
    """What changes when a dataset is written to: its dataset.json's and its folders' stat."""
    out: list[int] = []
    for path in (folder / DATASET_FILE, folder / SHARDS_DIR, folder / MANIFEST_DIR):
        try:
            stat = path.stat()
            out += [stat.st_mtime_ns, stat.st_size, stat.st_ino]
        except OSError:
            out += [-1, -1, -1]
    return tuple(out)


class ViewApp:
    """The dataset pages of one datasets root, answered by path.

    Args:
        root: The datasets root.
        fps: Frames per second of videos a request does not set.
    """

    def __init__(self, root: Path, *, fps: float = DEFAULT_FPS) -> None:
        self.root = root
        self.fps = fps
        self._loaded: OrderedDict[str, LoadedDataset] = OrderedDict()
        self._videos: OrderedDict[tuple[Any, ...], bytes | str] = OrderedDict()
        self._video_bytes = 0
        self._lock = threading.Lock()  # the caches, and loads (load warnings are caught process-wide)

    # ------------------------------------------------------------------ the documents

    def listing_html(self, linked: Collection[str] | None = None) -> str:
        """The listing page of every dataset under the root (``linked``: those whose pages are linked; None:
        every readable one)."""
        return index_page(listing_groups(self.root), root=str(self.root), generated=datetime.now(), linked=linked)

    def loaded(self, dataset_id: str) -> LoadedDataset:
        """The dataset ``dataset_id`` loaded (kept while its folder is unchanged), with its card.

        Raises:
            DatasetNotFoundError: No such dataset, or one the page may not serve (the message says which).
            DatasetError: It cannot be read.
        """
        located = locate_served(self.root, dataset_id)
        if located.folder is None:
            raise DatasetNotFoundError(located.message)
        signature = _signature(located.folder)
        with self._lock:
            kept = self._loaded.get(dataset_id)
            if kept is not None and kept.signature == signature:
                self._loaded.move_to_end(dataset_id)
                return kept
            dataset, damage = open_for_view(dataset_id, self.root)
            entry = LoadedDataset(dataset, dataset_card(dataset, damage), signature)
            self._loaded[dataset_id] = entry
            while len(self._loaded) > KEPT_DATASETS:
                self._loaded.popitem(last=False)[1].dataset.close()
            return entry

    def dataset_html(self, dataset_id: str, **page_options: Any) -> str:
        """A dataset's page (``pages.dataset_page``'s options passed on)."""
        return dataset_page(self.loaded(dataset_id).card, fps=page_options.pop("fps", self.fps), **page_options)

    def _with_dataset(self, dataset_id: str, read: Callable[[Dataset], _T]) -> _T:
        entry = self.loaded(dataset_id)
        with entry.lock:
            return read(entry.dataset)

    def video(self, dataset_id: str, episode_id: int, *, container: str = "webm", fps: float | None = None) -> bytes | str:
        """An episode's video file, or why it has none; both kept while the dataset is unchanged.

        Args:
            dataset_id: The dataset.
            episode_id: The episode's global id.
            container: "webm" (VP9) or "mp4" (H.264).
            fps: Frames per second (None: the app's).

        Returns:
            The file's bytes: the episode's frames from ``Dataset.render_episode``, scaled up to
            :data:`MIN_VIDEO_SIDE`, encoded by ``vcollect.render``'s writer; or, when it has no frames, the
            renderer's reason (one of :data:`NO_FRAMES`' messages).

        Raises:
            EncoderUnavailableError: imageio-ffmpeg is not installed (the message names the extra).
            DatasetNotFoundError, DatasetError: The dataset cannot be found or read.
        """
        fps = self.fps if fps is None else fps
        require_encoder()  # before any frames are read or replayed
        entry = self.loaded(dataset_id)
        key = (dataset_id, entry.signature, episode_id, container, fps)
        with self._lock:
            if key in self._videos:
                self._videos.move_to_end(key)
                return self._videos[key]
        data: bytes | str
        try:
            with entry.lock:
                frames = entry.dataset.render_episode(episode_id)
            data = encode_video(frames, f".{container}", fps, min_side=MIN_VIDEO_SIDE)
        except NO_FRAMES as exc:
            data = str(exc)
        with self._lock:
            self._videos[key] = data
            self._video_bytes += len(data)
            while self._video_bytes > KEPT_VIDEO_BYTES and len(self._videos) > 1:
                self._video_bytes -= len(self._videos.popitem(last=False)[1])
        return data

    def rewards_svg(self, dataset_id: str, episode_id: int) -> str:
        """An episode's reward curve."""
        rewards = self._with_dataset(dataset_id, lambda ds: episode_rewards(ds, episode_id))
        return line_svg(rewards, title=f"episode {episode_id}: reward per step, return so far (dashed)")

    def verify_json(self, dataset_id: str) -> dict[str, Any]:
        """``Dataset.verify``'s report as JSON (``ok``, ``problems``, ``shards``, ``episodes``)."""
        return self._with_dataset(dataset_id, verify_report).to_json()

    # ------------------------------------------------------------------ requests

    def respond(self, target: str) -> Response:
        """The response to a GET of ``target`` (a request's path and query).

        Args:
            target: The request target, e.g. ``/d/ns/name-v0/episode/3.webm?fps=15``.

        Returns:
            The response; 404 for an unknown path, dataset or episode, 403 for one outside the root.
        """
        parts = urlsplit(target)
        path = unquote(parts.path)
        if "\x00" in path:
            return _text(HTTPStatus.BAD_REQUEST, "bad path")
        if path in ("/", "/index.html"):
            return _html(self.listing_html())
        match = _DATASET_ROUTE.match(path)
        slash = _DATASET_ROUTE.match(path + "/") if match is None else None
        if match is None and (slash is None or slash["page"] is not None or slash["id"] != path[3:]):
            return _text(HTTPStatus.NOT_FOUND, f"no page at {path}")
        route = match if match is not None else slash
        assert route is not None
        dataset_id = route["id"]
        located = locate_served(self.root, dataset_id)
        if located.folder is None:
            return _text(located.status, located.message)
        if match is None:  # a dataset's page without its trailing slash: its relative links need one
            return Response(HTTPStatus.MOVED_PERMANENTLY, "text/plain", b"", {"Location": parts.path + "/"})
        try:
            return self._dataset_response(dataset_id, match, parse_qs(parts.query))
        except DatasetNotFoundError as exc:
            return _text(HTTPStatus.NOT_FOUND, str(exc))
        except DatasetError as exc:
            return _text(HTTPStatus.INTERNAL_SERVER_ERROR, f"dataset {dataset_id!r} cannot be read: {exc}")

    def _dataset_response(self, dataset_id: str, match: re.Match[str], query: dict[str, list[str]]) -> Response:
        if match["verify"]:
            try:
                report = self.verify_json(dataset_id)
            except DatasetError as exc:
                report = {"ok": False, "problems": [], "error": str(exc)}
            return Response(HTTPStatus.OK, "application/json", json.dumps(report).encode(), {"Cache-Control": "no-store"})
        if match["episode"] is None:
            return _html(self.dataset_html(dataset_id))
        episode_id = int(match["episode"])
        total = self.loaded(dataset_id).dataset.total_episodes
        if episode_id >= total:
            return _text(HTTPStatus.NOT_FOUND, f"dataset {dataset_id!r} has no episode {episode_id} ({total} episodes)")
        if match["rewards"]:
            return Response(HTTPStatus.OK, "image/svg+xml", self.rewards_svg(dataset_id, episode_id).encode())
        fps = self.fps
        if "fps" in query:
            try:
                fps = float(query["fps"][-1])
            except ValueError:
                fps = float("nan")
            if not 0 < fps <= MAX_FPS:
                return _text(HTTPStatus.BAD_REQUEST, f"fps must be a number in (0, {MAX_FPS:g}], got {query['fps'][-1]!r}")
        container = match["container"]
        try:
            video = self.video(dataset_id, episode_id, container=container, fps=fps)
        except EncoderUnavailableError as exc:
            return _text(HTTPStatus.NOT_IMPLEMENTED, f"no video of episode {episode_id}: {exc}")
        if isinstance(video, str):
            return _text(HTTPStatus.NOT_FOUND, f"no video of episode {episode_id}: {video}")
        return Response(HTTPStatus.OK, MEDIA_TYPES[f".{container}"], video)
