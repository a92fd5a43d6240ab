"""Remote transfers against local S3 and GCS servers (each in a process of its own, so the CPU time measured
here is the client's): vcollect's download of a dataset of several shards against a plain loop of the
client library's own downloads of the same objects; the bytes a re-upload moves after the dataset grew by
1%; and vcollect's download against ``minari download`` of the same data from the GCS emulator.

    python benchmarks/remote_transfer.py [--mb 250] [--shards 10] [--tmp /dev/shm]

The servers are local, so these are ratios of client overhead, not of a network. Frames are uint8 84x84
noise (incompressible, so the bytes on the wire are the bytes stored). Beside each download's wall clock and
the client's CPU time, the servers' CPU time (from /proc, on Linux) and the load average are printed: on a
shared machine the CPU times are the steadier figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

FRAME = (84, 84)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)  # noqa: S310 - a local server
            return
        except Exception as exc:  # noqa: BLE001 - not up yet
            if getattr(exc, "code", None) is not None:
                return  # it answered (an HTTP error is an answer)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def start_servers(tmp: Path) -> list[subprocess.Popen[bytes]]:
    bin_dir = Path(sys.executable).parent
    s3_port, gcs_port = free_port(), free_port()
    procs = [
        subprocess.Popen([str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([str(bin_dir / "gcp-storage-emulator"), "start", "--host", "127.0.0.1", "--port",
                          str(gcs_port), "--in-memory"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{s3_port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                      STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{gcs_port}", GOOGLE_CLOUD_PROJECT="bench")
    wait_http(f"http://127.0.0.1:{s3_port}/")
    wait_http(f"http://127.0.0.1:{gcs_port}/")
    return procs


def make_dataset(root: Path, dataset_id: str, megabytes: int, shards: int) -> None:
    from vcollect.store import EpisodeStore, StoreOptions

    frames_per_shard = megabytes * 2**20 // shards // (FRAME[0] * FRAME[1])
    store = EpisodeStore.create(
        dataset_id, spaces.Box(0, 255, FRAME, np.uint8), spaces.Discrete(6), root=root,
        options=StoreOptions(compression="none"),
    )
    rng = np.random.default_rng(0)
    steps = 999
    for _ in range(shards):
        for _ in range(max(1, frames_per_shard // (steps + 1))):
            store.write_episode(rng.integers(0, 256, (steps + 1, *FRAME), dtype=np.uint8),
                                rng.integers(0, 6, steps), np.zeros(steps), np.eye(1, steps, steps - 1, dtype=bool)[0],
                                np.zeros(steps, dtype=bool), seed=0, env_id=0)
        store.flush()
    store.close()


SERVERS: list[subprocess.Popen[bytes]] = []


def servers_cpu() -> float:
    """CPU seconds the server processes have used so far (0 where /proc cannot tell)."""
    total = 0.0
    for proc in SERVERS:
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any, float]:
    """(wall s, this process's CPU s, fn's result, the servers' CPU s)."""
    server, wall, cpu = servers_cpu(), time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out, servers_cpu() - server


def dataset_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in (folder / "shards").iterdir())


def compare_download(scheme: str, dataset_id: str, src: Path, tmp: Path) -> tuple[Any, Any]:
    """(vcollect's download, the client loop): the best (wall, CPU) of 3 paired runs, alternating."""
    import vcollect
    from vcollect.remote import open_remote

    remote = open_remote(f"{scheme}://bench-{scheme}")
    remote.fs.mkdir(remote.bucket)
    vcollect.upload_dataset(dataset_id, remote.url, root=src)
    shard_paths = sorted(str(p) for p in remote.fs.ls(remote.path(dataset_id, "shards")))

    def loop(folder: Path) -> None:
        for path in shard_paths:
            remote.fs.get_file(path, str(folder / Path(path).name))

    ours, plain = [], []
    for rep in range(3):  # fresh folders each time
        dst, loop_dir = tmp / f"dst-{scheme}-{rep}", tmp / f"loop-{scheme}-{rep}"
        loop_dir.mkdir()
        ours.append(timed(lambda dst=dst: vcollect.download_dataset(dataset_id, remote.url, root=dst)))
        plain.append(timed(lambda loop_dir=loop_dir: loop(loop_dir)))
        shutil.rmtree(dst)
        shutil.rmtree(loop_dir)
    return min(ours, key=lambda r: r[0]), min(plain, key=lambda r: r[0])


def streaming(scheme: str, dataset_id: str, src: Path, tmp: Path) -> None:
    """First sample_steps(256) of a dataset read in place (the blocks its rows lie in), the time until the
    background fetch holds all of it, and the p50 after that against the local copy."""
    import vcollect
    from vcollect.store import load_dataset

    os.environ["VCOLLECT_CACHE"] = str(tmp / f"cache-{scheme}")
    wall, cpu = time.perf_counter(), time.process_time()
    remote_ds = vcollect.load_dataset(f"{scheme}://bench-{scheme}/{dataset_id}")
    remote_ds.set_seed(0)
    remote_ds.sample_steps(256)
    first, first_cpu = time.perf_counter() - wall, time.process_time() - cpu
    cache = remote_ds._index.files.before_open  # noqa: SLF001 - the cache's counters
    first_bytes = cache.fetched_bytes
    cache.wait_for_prefetch(600)  # warm-up: the background fetch of the rest
    copied = time.perf_counter() - wall
    local = load_dataset(dataset_id, src)
    local.set_seed(0)
    times: dict[str, list[float]] = {"remote": [], "local": []}
    for _ in range(3):
        remote_ds.sample_steps(256)
        local.sample_steps(256)
    for _ in range(50):
        for name, ds in (("remote", remote_ds), ("local", local)):
            wall = time.perf_counter()
            ds.sample_steps(256)
            times[name].append(time.perf_counter() - wall)
    p50 = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    print(f"read in place from {scheme}: open + first sample_steps(256) {first:.2f} s wall / {first_cpu:.2f} s CPU "
          f"({first_bytes / 2**20:.0f} MiB fetched); all of it held {copied:.2f} s after opening "
          f"({cache.fetched_bytes / 2**20:.0f} MiB); p50 after that {p50['remote']:.2f} ms vs local "
          f"{p50['local']:.2f} ms ({p50['remote'] / p50['local']:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=250)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--tmp", default=None, metavar="DIR",
                        help="where the datasets are written (e.g. /dev/shm: no disk in the timings)")
    parser.add_argument("--stream-only", action="store_true",
                        help="only the reading-in-place rows (upload to S3, then the first and later batches)")
    args = parser.parse_args()
    import vcollect
    from vcollect.remote import open_remote
    from vcollect.store import load_dataset

    tmp = Path(tempfile.mkdtemp(prefix="vcollect-remote-bench-", dir=args.tmp))
    procs = start_servers(tmp)
    SERVERS.extend(procs)
    try:
        src = tmp / "src"
        dataset_id = "bench/frames-v0"
        make_dataset(src, dataset_id, args.mb, args.shards)
        total = dataset_bytes(src / "bench" / "frames-v0")
        print(f"dataset: {total / 2**20:.0f} MiB in {args.shards} shards (uint8 84x84 noise frames)")
        if args.stream_only:
            for scheme in ("s3", "gs"):
                remote = open_remote(f"{scheme}://bench-{scheme}")
                remote.fs.mkdir(remote.bucket)
                vcollect.upload_dataset(dataset_id, remote.url, root=src)
                streaming(scheme, dataset_id, src, tmp)
            return
        rows = [(scheme, *compare_download(scheme, dataset_id, src, tmp)) for scheme in ("s3", "gs")]
        for scheme, o, p in rows:
            print(f"{scheme} download: vcollect {o[0]:.2f} s wall / {o[1]:.2f} s CPU (server {o[3]:.2f} s); client loop "
                  f"{p[0]:.2f} s wall / {p[1]:.2f} s CPU (server {p[3]:.2f} s); throughput ratio {p[0] / o[0]:.2f} "
                  f"(bar >= 0.8); load average {os.getloadavg()[0]:.1f}")

        for scheme in ("s3", "gs"):
            streaming(scheme, dataset_id, src, tmp)

        # growth by 1%: one more shard of ~1% of the bytes
        from vcollect.store import EpisodeStore

        store = EpisodeStore.open(dataset_id, root=src)
        rng = np.random.default_rng(1)
        steps = max(2, total // 100 // (FRAME[0] * FRAME[1]) - 1)
        store.write_episode(rng.integers(0, 256, (steps + 1, *FRAME), dtype=np.uint8), rng.integers(0, 6, steps),
                            np.zeros(steps), np.eye(1, steps, steps - 1, dtype=bool)[0], np.zeros(steps, dtype=bool),
                            seed=0, env_id=0)
        store.close()
        grown = dataset_bytes(src / "bench" / "frames-v0")
        report = vcollect.upload_dataset(dataset_id, "s3://bench-s3", root=src)
        print(f"re-upload after {100 * (grown - total) / total:.2f}% growth: moved {report.bytes / 2**20:.2f} MiB = "
              f"{100 * report.bytes / grown:.2f}% of the dataset's {grown / 2**20:.0f} MiB ({report.shards} shard)")

        # vs minari download from the GCS emulator (Minari's layout), same data
        import minari

        remote = open_remote("gs://bench-minari")
        remote.fs.mkdir(remote.bucket)
        vcollect.upload_dataset(dataset_id, "gs://bench-minari", root=src, format="minari")
        vcollect.upload_dataset(dataset_id, "gs://bench-gs", root=src)
        os.environ["MINARI_REMOTE"] = "gcp://bench-minari"
        os.environ["MINARI_DATASETS_PATH"] = str(tmp / "minari")
        theirs = timed(lambda: minari.download_dataset(dataset_id))
        ours_gs = timed(lambda: vcollect.download_dataset(dataset_id, "gs://bench-gs", root=tmp / "dst-vs-minari"))
        minari_bytes = sum(p.stat().st_size for p in (tmp / "minari").rglob("*") if p.is_file())
        print(f"gs: minari download {theirs[0]:.2f} s wall / {theirs[1]:.2f} s CPU ({minari_bytes / 2**20:.0f} MiB); "
              f"vcollect download {ours_gs[0]:.2f} s wall / {ours_gs[1]:.2f} s CPU "
              f"({dataset_bytes(tmp / 'dst-vs-minari' / 'bench' / 'frames-v0') / 2**20:.0f} MiB, every shard checked); "
              f"speed-up {theirs[0] / ours_gs[0]:.2f}x")
        assert load_dataset(dataset_id, tmp / "dst-vs-minari").total_steps > 0
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
