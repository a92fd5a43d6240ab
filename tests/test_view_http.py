"""``vcollect view`` over plain HTTP and on the command line: the real server in a subprocess refuses paths
outside the datasets root (``..``, absolute paths, symbolic links) and every method but GET/HEAD, serves
videos by byte range; a port in use and an unknown dataset are one line and exit 2; ``--static`` writes the
pages, videos and reward curves as files that need no internet."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import imageio.v3 as iio
import pytest
from small_datasets import make_dataset
from view_datasets import CARTPOLE_ID, FRAME_SHAPE, FRAMES_ID, FRAMES_LENGTHS, make_view_root

from vcollect.cli import main
from vcollect.store import load_dataset

START_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("view")
    root = make_view_root(base / "root")
    outside = base / "outside"
    make_dataset(outside, "secret/hidden-v0", [3, 3])
    (outside / "plain.txt").write_text("TOKEN-outside-7f3a")
    os.symlink(outside / "secret", root / "linkedns")  # a namespace folder that is a link out of the root
    (root / "ns2").mkdir()
    os.symlink(outside / "secret" / "hidden-v0", root / "ns2" / "hidden-v0")  # a dataset folder that is a link
    return root


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[tuple[str, int]]:
    """``vcollect view --port 0`` in a subprocess: (host, port) from the line it prints."""
    proc = subprocess.Popen([sys.executable, "-m", "vcollect", "view", "--root", str(root), "--port", "0", "--fps", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        line = ""
        while not line and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if ready:
                line = proc.stdout.readline()  # type: ignore[union-attr]
            if proc.poll() is not None and not line:
                break
        match = re.search(r"http://([\d.]+):(\d+)/", line)
        assert match, f"no address printed: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"  # type: ignore[union-attr]
        yield match[1], int(match[2])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def request(server: tuple[str, int], method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One raw request (the path sent as given, not normalised)."""
    connection = http.client.HTTPConnection(*server, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_pages_and_ids_under_the_root_are_served(server: tuple[str, int]) -> None:
    status, headers, body = request(server, "GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert FRAMES_ID.encode() in body and b"hidden-v0" not in body  # linked datasets are not listed
    status, _, body = request(server, "GET", f"/d/{CARTPOLE_ID}/")
    assert status == 200 and b'id="episode-table"' in body
    status, headers, _ = request(server, "GET", f"/d/{CARTPOLE_ID}")
    assert status == 301 and headers["Location"] == f"/d/{CARTPOLE_ID}/"
    status, _, body = request(server, "GET", f"/d/{CARTPOLE_ID}/episode/6/rewards.svg")
    assert status == 404 and b"has no episode 6" in body
    status, _, body = request(server, "GET", "/d/cartpole/none-v0/")
    assert status == 404


@pytest.mark.parametrize("path", [
    "/d/../outside/secret/hidden-v0/",
    "/d/%2e%2e/outside/secret/hidden-v0/",
    "/d/cartpole/../../outside/secret/hidden-v0/index.html",
    "/d//etc/passwd/",
    "/d/%2Fetc/x-v0/",
    "/d/linkedns/hidden-v0/",
    "/d/linkedns/hidden-v0/episode/0/rewards.svg",
    "/d/ns2/hidden-v0/",
    "/d/ns2/hidden-v0/verify.json",
    "/../outside/plain.txt",
    "/d/../outside/plain.txt",
])
def test_nothing_outside_the_root_is_served(server: tuple[str, int], path: str) -> None:
    status, _, body = request(server, "GET", path)
    assert status in (403, 404), (path, status)
    assert b"TOKEN-outside" not in body and b"<html" not in body and b"<svg" not in body
    if "linkedns" in path or "ns2" in path:
        assert status == 403 and b"symbolic link" in body


def test_only_loopback_host_names_are_answered(server: tuple[str, int]) -> None:
    for host in (f"127.0.0.1:{server[1]}", f"localhost:{server[1]}", f"[::1]:{server[1]}"):
        assert request(server, "GET", "/", headers={"Host": host})[0] == 200, host
    status, _, body = request(server, "GET", "/", headers={"Host": f"attacker.example:{server[1]}"})
    assert status == 403 and b"localhost only" in body and FRAMES_ID.encode() not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_every_method_but_get_and_head_is_refused(server: tuple[str, int], root: Path, method: str) -> None:
    status, headers, body = request(server, method, f"/d/{CARTPOLE_ID}/", body=b"x" if method != "OPTIONS" else None)
    assert status == 405 and headers["Allow"] == "GET, HEAD" and b"read-only" in body
    assert load_dataset(CARTPOLE_ID, root=root).total_episodes == 6  # untouched
    status, headers, body = request(server, "HEAD", f"/d/{CARTPOLE_ID}/")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_video_is_served_whole_and_by_range(server: tuple[str, int]) -> None:
    path = f"/d/{FRAMES_ID}/episode/1.webm?fps=10"
    status, headers, whole = request(server, "GET", path)
    assert status == 200 and headers["Content-Type"] == "video/webm" and headers["Accept-Ranges"] == "bytes"
    frames = iio.imread(whole, extension=".webm")
    assert frames.shape[0] == FRAMES_LENGTHS[1] + 1
    assert frames.shape[1] / frames.shape[2] == FRAME_SHAPE[0] / FRAME_SHAPE[1]
    status, headers, part = request(server, "GET", path, headers={"Range": "bytes=10-99"})
    assert status == 206 and part == whole[10:100] and headers["Content-Range"] == f"bytes 10-99/{len(whole)}"
    status, _, tail = request(server, "GET", path, headers={"Range": "bytes=-16"})
    assert status == 206 and tail == whole[-16:]
    status, headers, _ = request(server, "GET", path, headers={"Range": f"bytes={len(whole)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(whole)}"
    status, _, body = request(server, "GET", f"/d/{FRAMES_ID}/episode/1.webm?fps=0")
    assert status == 400 and b"fps" in body
    status, _, body = request(server, "GET", f"/d/{CARTPOLE_ID}/episode/1.webm")
    # its observations are not images and its stored steps are not CartPole's own: the replay says where it differs
    assert status == 404 and b"no video of episode 1" in body and b"diverged from its replay at step 0" in body


def test_port_in_use_is_one_line_and_exit_2(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["view", "--root", str(root), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--port {port}" in err and "already in use" in err


def test_unknown_or_linked_dataset_is_one_line_and_exit_2(root: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "cartpole/none-v0", "--root", str(root), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no dataset 'cartpole/none-v0'" in err
    assert main(["view", "ns2/hidden-v0", "--root", str(root), "--static", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "symbolic link" in err
    assert not (tmp_path / "out").exists()


def test_static_writes_pages_videos_and_curves(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert main(["view", "--root", str(root), "--static", str(out), "--videos", "2", "--fps", "5", "--verify"]) == 0
    page = out / "d" / FRAMES_ID / "index.html"
    assert (out / "index.html").is_file() and page.is_file() and (out / "d" / CARTPOLE_ID / "index.html").is_file()
    assert not (out / "d" / "ns2").exists() and not (out / "d" / "linkedns").exists()
    for episode in (0, 1):
        video = iio.imread((page.parent / "episode" / f"{episode}.webm").read_bytes(), extension=".webm")
        assert video.shape[0] == FRAMES_LENGTHS[episode] + 1
        assert (page.parent / "episode" / str(episode) / "rewards.svg").read_text().startswith("<svg")
    assert not (page.parent / "episode" / "2.webm").exists()
    assert not (out / "d" / CARTPOLE_ID / "episode").exists()  # no images: no videos, said on its page
    text = page.read_text()
    assert "verified: 1 shards, 3 episodes, no problems" in text
    assert '"videos":[0,1]' in text
    for html in out.rglob("*.html"):  # no outside asset: every src/href is relative or inline
        links = re.findall(r'(?:src|href)="([^"]*)"', html.read_text())
        assert links and all(not re.match(r"^[a-z]+:", link) or link == "data:," for link in links), (html, links)


def test_damaged_dataset_is_listed_and_shown_with_its_damage(tmp_path: Path) -> None:
    from vcollect.view.routes import ViewApp

    make_dataset(tmp_path, "ns/damaged-v0", [3, 4, 5, 6], episodes_per_shard=2)
    shards = sorted((tmp_path / "ns" / "damaged-v0" / "shards").glob("*.h5"))
    shards[-1].unlink()  # a recorded shard gone: damage, its episodes left out of every count
    app = ViewApp(tmp_path)
    listing = app.respond("/").body.decode()
    assert "damaged</span> (1 problem" in listing
    page = app.respond("/d/ns/damaged-v0/")
    assert page.status == 200
    text = page.body.decode()
    assert "damaged: 1 problem found when loading" in text and shards[-1].name in text
    assert '"episodes":[[0,0.0,3,100],[1,4.0,4,101]]' in text  # the whole shard's episodes only
    report = json.loads(app.respond("/d/ns/damaged-v0/verify.json").body)
    assert not report["ok"] and any(shards[-1].name in problem for problem in report["problems"])
