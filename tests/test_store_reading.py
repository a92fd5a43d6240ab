"""Reading stores within bounded resources, and refusing what is malformed with errors naming the file.

Open files (a real subprocess under RLIMIT_NOFILE), the sample_steps cache bound, non-regular files in
``shards/``, crafted shards (h5py-made) and malformed ``dataset.json`` files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from gymnasium import spaces

import vcollect.store.read.reader as reader_module
from tests import forked_scripts
from vcollect.errors import CorruptDatasetError, CorruptShardError
from vcollect.store import EpisodeStore, list_datasets, load_dataset
from vcollect.store.read.reader import StoredDataset

OBS = spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float64)
ACT = spaces.Discrete(7)


def episode(code: int, steps: int) -> dict[str, np.ndarray]:
    """Episode ``code``: observation rows (code, row), rewards code * 1000 + row."""
    rows = np.arange(steps + 1)
    return {
        "observations": np.stack([np.full(steps + 1, code), rows], axis=1).astype(np.float64),
        "actions": (code + rows[:-1]) % 7,
        "rewards": code * 1000.0 + rows[:-1],
        "terminations": rows[:-1] == steps - 1,
        "truncations": np.zeros(steps, bool),
    }


def run_python(script: str, root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``root`` and ``args`` as its arguments in a process of its own, forked from a
    server that has imported vcollect (tests/forked_scripts.py): its descriptor limit is its own."""
    return forked_scripts.run(["-c", textwrap.dedent(script), str(root), *args], {}, str(root),
                              str(root.parent / f"{root.name}-stderr.txt"), timeout)


# ---------------------------------------------------------------------------------------- open files

MANY_LENGTHS = (1, 2)  # the two episodes of every shard of the many-shards dataset


def make_many_shards(root: Path, n_shards: int) -> Path:
    """A dataset of ``n_shards`` real shards fast: one shard committed by EpisodeStore, copied with its
    observation, reward and return columns rewritten in place (episode code = 2 * shard + row), each copy
    named and numbered as its writer's next shard; the manifest is left out (as one lost: every shard is
    opened at load)."""
    with EpisodeStore.create("m/many-v0", OBS, ACT, root=root) as store:
        for code, steps in enumerate(MANY_LENGTHS):
            store.write_episode(**episode(code, steps), seed=code, env_id=0)
    (template,) = store.shards_written
    with h5py.File(template) as f:
        offsets = {name: f[name].id.get_offset() for name in ("observations", "rewards", "episodes/return")}
    data = template.read_bytes()
    template.unlink()
    shutil.rmtree(root / "m" / "many-v0" / "manifest")
    writer = template.name.split("-")[1]
    for s in range(n_shards):
        eps = [episode(2 * s + row, steps) for row, steps in enumerate(MANY_LENGTHS)]
        columns = {
            "observations": np.concatenate([e["observations"] for e in eps]),
            "rewards": np.concatenate([e["rewards"] for e in eps]).astype(np.float32),
            "episodes/return": np.array([e["rewards"].sum() for e in eps]),
        }
        buf = bytearray(data)
        for name, arr in columns.items():
            raw = arr.tobytes()
            buf[offsets[name] : offsets[name] + len(raw)] = raw
        copy = template.parent / f"{s:020d}-{writer}-{s:06d}.h5"
        copy.write_bytes(bytes(buf))
        with h5py.File(copy, "r+") as f:
            f.attrs["seq"] = s
    return template.parent


@pytest.mark.slow
def test_shards_far_past_the_descriptor_limit_read_whole_with_64_file_descriptors(tmp_path: Path) -> None:
    """300 shards (each opened at load, the manifest being lost) under a limit of 64 descriptors: nearly five
    times the limit and ten times the 32 files a dataset keeps open."""
    n = 300
    make_many_shards(tmp_path, n)
    result = run_python(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        import numpy as np
        from vcollect.store import load_dataset
        from vcollect.store.read.reader import StoredDataset

        n = int(sys.argv[2])
        ds = load_dataset("m/many-v0", root=sys.argv[1])
        assert ds.total_episodes == 2 * n and ds.total_steps == 3 * n, ds
        seen = 0
        for ep in ds:
            steps = 1 + ep.id % 2
            assert len(ep) == steps and ep.observations[:, 0].tolist() == [ep.id] * (steps + 1)
            assert ep.rewards.tolist() == [ep.id * 1000.0 + r for r in range(steps)]
            seen += 1
        assert seen == 2 * n and 0 < StoredDataset(ds).open_files <= 32, (seen, StoredDataset(ds).open_files)
        np.testing.assert_array_equal(ds.episode_returns[1::2], [(2 * s + 1) * 2000.0 + 1 for s in range(n)])
        for cache_bytes in (0, None):  # rows read from the files, then from the in-memory copy
            batch = ds.sample_steps(20_000, cache_bytes=cache_bytes)
            code, row = batch["observations"][:, 0], batch["observations"][:, 1]
            assert np.all(row < 1 + code % 2) and len(np.unique(code)) > n
            np.testing.assert_array_equal(batch["next_observations"][:, 1], row + 1)
            np.testing.assert_array_equal(batch["rewards"], code * 1000.0 + row)
            assert StoredDataset(ds).open_files <= 32
        assert StoredDataset(ds).sample_cache_nbytes > 0
        ds.close()
        assert StoredDataset(ds).open_files == 0 and len(ds[5]) == 2  # reopens on use
        print("read", seen)
        """,
        tmp_path, str(n),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"read {2 * n}"


def test_lru_keeps_at_most_max_open_files(tmp_path: Path) -> None:
    make_many_shards(tmp_path, 12)
    ds = load_dataset("m/many-v0", root=tmp_path, max_open_files=3)
    for ep in ds:
        assert StoredDataset(ds).open_files <= 3
        np.testing.assert_array_equal(ep.observations[:, 0], ep.id)
    assert StoredDataset(ds).open_files == 3
    view = ds.filter_episodes(lambda ep: ep.id >= 20)  # views share the open files
    batch = view.sample_steps(500, cache_bytes=0)
    assert set(batch["observations"][:, 0].tolist()) == {20, 21, 22, 23}
    assert StoredDataset(ds).open_files == 3 and StoredDataset(ds).sample_cache_nbytes == 0
    with pytest.raises(ValueError, match="capacity"):
        load_dataset("m/many-v0", root=tmp_path, max_open_files=0)


def test_compressed_shards_read_through_a_bounded_set_of_hdf5_files(tmp_path: Path) -> None:
    lengths = [4, 1, 6, 3, 2, 5]
    with EpisodeStore.create("m/gz-v0", OBS, ACT, root=tmp_path, compression="gzip", shard_steps=4) as store:
        for code, steps in enumerate(lengths):
            store.write_episode(**episode(code, steps), seed=code, env_id=0, infos={"t": np.arange(steps + 1)})
    ds = load_dataset("m/gz-v0", root=tmp_path, max_open_files=2)
    assert len(StoredDataset(ds).shard_paths) == 4
    for ep in ds:
        want = episode(ep.id, lengths[ep.id])
        np.testing.assert_array_equal(ep.observations, want["observations"])
        np.testing.assert_array_equal(ep.rewards, want["rewards"])
        np.testing.assert_array_equal(ep.infos["t"], np.arange(lengths[ep.id] + 1))
        assert StoredDataset(ds).open_files <= 2
    batch = ds.sample_steps(300, cache_bytes=0)
    code, row = batch["observations"][:, 0].astype(int), batch["observations"][:, 1]
    np.testing.assert_array_equal(batch["rewards"], code * 1000.0 + row)
    np.testing.assert_array_equal(batch["actions"], (code + row) % 7)
    assert set(code.tolist()) == {0, 1, 2, 3, 4, 5} and StoredDataset(ds).open_files <= 2 and StoredDataset(ds).sample_cache_nbytes == 0


def test_too_many_open_files_is_not_a_corrupt_shard(tmp_path: Path) -> None:
    make_many_shards(tmp_path, 3)
    result = run_python(
        """
        import errno, os, resource, sys
        from vcollect.errors import CorruptDatasetError, CorruptShardError
        from vcollect.store import load_dataset

        ds = load_dataset("m/many-v0", root=sys.argv[1])
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        for what, call in (("load", lambda: load_dataset("m/many-v0", root=sys.argv[1])), ("read", lambda: ds[0])):
            try:
                call()
            except (CorruptShardError, CorruptDatasetError) as exc:
                print(what, "blamed the data:", exc)
            except OSError as exc:
                print(what, errno.errorcode[exc.errno])
            else:
                print(what, "succeeded")
        for fd in held:
            os.close(fd)
        print("after", len(ds[0]))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["load EMFILE", "read EMFILE", "after 1"]


def test_default_max_open_files_follows_the_descriptor_limit_and_gives_back_files_when_out(tmp_path: Path) -> None:
    make_many_shards(tmp_path, 40)
    result = run_python(
        """
        import os, resource, sys
        from vcollect.store import load_dataset
        from vcollect.store.read.reader import default_max_open_files

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        for soft in (64, 256, 1024, 8192):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard), hard))
            print(soft, default_max_open_files())
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
        ds = load_dataset("m/many-v0", root=sys.argv[1])
        for i in range(0, 60, 2):  # 30 shards' maps open
            ds[i]
        before = ds.open_files
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        ep = ds[75]  # a shard not open yet, no descriptor left: half of the dataset's files are given back
        for fd in held:
            os.close(fd)
        print("read", before, ds.open_files, ep.observations[0].tolist())
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:5] == ["64 32", "256 64", "1024 256", "8192 256", "read 30 16 [75.0, 0.0]"]


# ---------------------------------------------------------------------------------------- sample cache


def test_sample_steps_copies_at_most_cache_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = [5, 3, 8, 2]
    with EpisodeStore.create("p/cache-v0", OBS, ACT, root=tmp_path, shard_steps=6) as store:
        for code, steps in enumerate(lengths):
            store.write_episode(**episode(code, steps), seed=code, env_id=0)
    steps, eps = sum(lengths), len(lengths)
    # observations (steps + episodes rows of 2 float64), actions int64, rewards float64, two bool flags
    size = (steps + eps) * 16 + steps * 8 + steps * 8 + 2 * steps

    ds = load_dataset("p/cache-v0", root=tmp_path)
    ds.set_seed(3)
    uncached = ds.sample_steps(200, cache_bytes=size - 1)
    assert StoredDataset(ds).sample_cache_nbytes == 0
    monkeypatch.setattr(reader_module, "SAMPLE_CACHE_BYTES", size - 1)
    ds.sample_steps(10)  # the default bound is SAMPLE_CACHE_BYTES
    assert StoredDataset(ds).sample_cache_nbytes == 0
    ds.set_seed(3)
    cached = ds.sample_steps(200, cache_bytes=size)
    assert StoredDataset(ds).sample_cache_nbytes == size
    for key in uncached:
        np.testing.assert_array_equal(cached[key], uncached[key])
        assert cached[key].dtype == uncached[key].dtype
    with pytest.raises(ValueError, match="cache_bytes"):
        ds.sample_steps(1, cache_bytes=-1)


def test_default_sample_cache_is_small() -> None:
    assert 0 < reader_module.SAMPLE_CACHE_BYTES <= 64 * 2**20


# ---------------------------------------------------------------------------------------- non-regular files


def test_fifos_and_directories_named_like_shards_are_ignored(tmp_path: Path) -> None:
    with EpisodeStore.create("f/x-v0", OBS, ACT, root=tmp_path) as store:
        store.write_episode(**episode(0, 3), seed=0, env_id=0)
    shards = store.path / "shards"
    os.mkfifo(shards / "x.h5")
    (shards / "dir.h5").mkdir()
    (shards / "dangling.h5").symlink_to(tmp_path / "nowhere.h5")
    with EpisodeStore.create("f/y-v0", OBS, ACT, root=tmp_path):
        pass
    os.unlink(tmp_path / "f" / "y-v0" / "dataset.json")
    os.mkfifo(tmp_path / "f" / "y-v0" / "dataset.json")
    # In a subprocess with a timeout: opening a FIFO for reading blocks until someone writes to it.
    result = run_python(
        """
        import sys
        from vcollect.errors import CorruptDatasetError
        from vcollect.store import list_datasets, load_dataset
        from vcollect.store.read.reader import StoredDataset

        ds = load_dataset("f/x-v0", root=sys.argv[1])
        print([p.name for p in StoredDataset(ds).shard_paths] == [sys.argv[2]], ds.total_episodes)
        listing = list_datasets(sys.argv[1])
        print(sorted(listing), listing["f/x-v0"]["num_shards"], "not a regular file" in listing["f/y-v0"]["broken"])
        try:
            load_dataset("f/y-v0", root=sys.argv[1])
        except CorruptDatasetError as exc:
            print("y:", exc)
        """,
        tmp_path, store.shards_written[0].name, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["True 1", "['f/x-v0', 'f/y-v0'] 1 True"]  # the FIFO one listed broken, not read
    assert lines[2].startswith("y: ") and "dataset.json is not a regular file" in lines[2]


# ---------------------------------------------------------------------------------------- crafted shards


def replace(f: h5py.File, name: str, data: np.ndarray, **kwargs: object) -> None:
    attrs = dict(f[name].attrs)
    del f[name]
    ds = f.create_dataset(name, data=data, **kwargs)
    ds.attrs.update(attrs)


def set_table(f: h5py.File, **columns: list[float]) -> None:
    for name, values in columns.items():
        f[f"episodes/{name}"][...] = values


def external_storage(f: h5py.File, tmp: Path) -> None:
    values = f["observations"][()]
    raw = tmp / "raw.bin"
    raw.write_bytes(values.tobytes())
    del f["observations"]
    f.create_dataset("observations", shape=values.shape, dtype=values.dtype, external=[(str(raw), 0, values.nbytes)])


def virtual_dataset(f: h5py.File, tmp: Path) -> None:
    values = f["observations"][()]
    with h5py.File(tmp / "source.h5", "w") as src:
        src["data"] = values
    layout = h5py.VirtualLayout(shape=values.shape, dtype=values.dtype)
    layout[:] = h5py.VirtualSource(str(tmp / "source.h5"), "data", shape=values.shape)
    del f["observations"]
    f.create_virtual_dataset("observations", layout)


def external_link(f: h5py.File, tmp: Path) -> None:
    with h5py.File(tmp / "other.h5", "w") as other:
        other["rewards"] = f["rewards"][()]
    del f["rewards"]
    f["rewards"] = h5py.ExternalLink(str(tmp / "other.h5"), "rewards")


def soft_link(f: h5py.File, tmp: Path) -> None:
    f["alias"] = h5py.SoftLink("/rewards")


def vlen_info(f: h5py.File, tmp: Path) -> None:
    ds = f.create_dataset("infos/text", data=np.array(["a"] * 8, dtype=object), dtype=h5py.string_dtype())
    ds.attrs["rows"] = "step"


CRAFTED: dict[str, tuple[Callable[[h5py.File, Path], None], str]] = {
    # lengths 9 and -1 with offsets that add up: only the sign is wrong
    "negative-length": (lambda f, t: set_table(f, length=[9, -1], step_offset=[0, 9], obs_offset=[0, 10]),
                        "negative length"),
    "offsets-do-not-add-up": (lambda f, t: set_table(f, step_offset=[0, 4]), "offsets do not match lengths"),
    "obs-offsets-do-not-add-up": (lambda f, t: set_table(f, obs_offset=[0, 3]), "offsets do not match lengths"),
    "negative-totals": (lambda f, t: f.attrs.__setitem__("num_episodes", -2), "negative totals"),
    "observations-as-bytes": (lambda f, t: replace(f, "observations", np.full((10, 2), b"abc")),
                              "'observations' has dtype |S3"),
    "float-actions-for-discrete": (lambda f, t: replace(f, "actions", np.zeros(8)), "'actions' has dtype float64"),
    "int-flags": (lambda f, t: replace(f, "terminations", np.zeros(8, np.int8)), "'terminations' has dtype int8"),
    "float-lengths": (lambda f, t: replace(f, "episodes/length", np.array([3.0, 5.0])),
                      "'episodes/length' has dtype float64"),
    "string-rewards": (lambda f, t: replace(f, "rewards", np.full(8, b"r")), "'rewards' has dtype |S1"),
    "variable-length-info": (vlen_info, "'infos/text' has dtype object"),
    "external-storage": (external_storage, "'observations' has external storage"),
    "virtual-dataset": (virtual_dataset, "'observations' is a virtual dataset"),
    "external-link": (external_link, "'rewards' is a ExternalLink"),
    "soft-link": (soft_link, "'alias' is a SoftLink"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_crafted_shard_is_corrupt_naming_file_and_fault(tmp_path: Path, case: str) -> None:
    with EpisodeStore.create("c/x-v0", OBS, ACT, root=tmp_path) as store:
        store.write_episode(**episode(0, 3), seed=0, env_id=0)
        store.write_episode(**episode(1, 5), seed=1, env_id=0)
    (shard,) = store.shards_written
    assert load_dataset("c/x-v0", root=tmp_path).total_steps == 8
    craft, fault = CRAFTED[case]
    with h5py.File(shard, "r+") as f:
        craft(f, tmp_path)
    with pytest.raises(CorruptShardError) as excinfo:
        load_dataset("c/x-v0", root=tmp_path)
    assert str(shard) in str(excinfo.value) and fault in str(excinfo.value)
    with pytest.warns(UserWarning, match=shard.name):
        assert load_dataset("c/x-v0", root=tmp_path, skip_corrupt=True).total_episodes == 0


# ---------------------------------------------------------------------------------------- dataset.json


def edit_info(info: dict, **changes: object) -> bytes:
    out = dict(info)
    for key, value in changes.items():
        if value is KeyError:
            del out[key]
        else:
            out[key] = value
    return json.dumps(out).encode()


MALFORMED: dict[str, tuple[Callable[[dict], bytes], str]] = {
    "not-utf8": (lambda info: b'{"format": "vcollect-dataset", "x": "\xff\xfe"}', "is not UTF-8 text"),
    "not-json": (lambda info: b"{", "is not valid JSON"),
    "deep-nesting": (lambda info: b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    "nested-lists-as-space": (
        lambda info: edit_info(info, observation_space=json.loads("[" * 500 + "]" * 500)),
        "observation_space is malformed"),
    "not-an-object": (lambda info: b"[1, 2]", "not a vcollect dataset description"),
    "other-format": (lambda info: edit_info(info, format="minari"), "not a vcollect dataset description"),
    "version-string": (lambda info: edit_info(info, format_version="1"), "format_version must be an integer"),
    "version-float": (lambda info: edit_info(info, format_version=1.5), "format_version must be an integer"),
    "version-bool": (lambda info: edit_info(info, format_version=True), "format_version must be an integer"),
    "version-missing": (lambda info: edit_info(info, format_version=KeyError), "format_version must be an integer"),
    "version-newer": (lambda info: edit_info(info, format_version=99), "newer than this vcollect"),
    "spaces-missing": (lambda info: edit_info(info, action_space=KeyError), "action_space is missing"),
    "space-not-a-space": (lambda info: edit_info(info, observation_space=[1]), "observation_space is malformed"),
    "space-unknown-type": (lambda info: edit_info(info, action_space={"type": "Nope"}), "action_space is malformed"),
    "space-box-no-bounds": (lambda info: edit_info(info, observation_space={"type": "Box", "dtype": "float32"}),
                            "observation_space is malformed"),
    "env-spec-number": (lambda info: edit_info(info, env_spec=5), "env_spec must be a JSON string"),
    "env-spec-not-json": (lambda info: edit_info(info, env_spec="{nope"), "env_spec is not a gymnasium env spec"),
    "env-spec-not-a-spec": (lambda info: edit_info(info, eval_env_spec='{"id": 1}'),
                            "eval_env_spec is not a gymnasium env spec"),
    "metadata-list": (lambda info: edit_info(info, metadata=[1, 2]), "metadata must be an object, got list"),
    "metadata-string": (lambda info: edit_info(info, metadata="x"), "metadata must be an object, got str"),
    "created-at-number": (lambda info: edit_info(info, created_at=5), "created_at must be a string"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_dataset_json_names_the_file(tmp_path: Path, case: str) -> None:
    with EpisodeStore.create("j/good-v0", OBS, ACT, root=tmp_path, metadata={"author": "a"}) as store:
        store.write_episode(**episode(0, 2), seed=0, env_id=0)
    with EpisodeStore.create("j/bad-v0", OBS, ACT, root=tmp_path) as bad:
        bad.write_episode(**episode(0, 2), seed=0, env_id=0)
    file = bad.path / "dataset.json"
    make, fault = MALFORMED[case]
    file.write_bytes(make(json.loads(file.read_text())))
    for open_it in (lambda: load_dataset("j/bad-v0", root=tmp_path), lambda: EpisodeStore.open("j/bad-v0", tmp_path)):
        with pytest.raises(CorruptDatasetError) as excinfo:
            open_it()
        assert str(file) in str(excinfo.value) and fault in str(excinfo.value)
    listing = list_datasets(tmp_path)  # one malformed dataset does not break listing the others, nor is hidden
    assert list(listing) == ["j/bad-v0", "j/good-v0"] and listing["j/good-v0"]["author"] == "a"
    assert str(file) in listing["j/bad-v0"]["broken"] and fault in listing["j/bad-v0"]["broken"]
    assert listing["j/good-v0"]["broken"] is None
