"""Tianshou 2.0.1's buffer and return tests (test/base/test_buffer.py, test/base/test_returns.py), ported to
vcollect.tianshou's replay-buffer adapter over vcollect's rings, with upstream's literal expected values.

Ported (the cases the rings cover):
- test_buffer.py: ``test_replaybuffer`` (its add / episode bookkeeping / prev / next part),
  ``test_replaybuffermanager`` (add, sample_indices, sample, prev, next, unfinished_index, wrap-around),
  ``test_get_replay_buffer_indices``, ``test_get_vector_replay_buffer_indices``, ``test_from_data``,
  ``test_multibuf_hdf5`` / ``test_hdf5`` (the round trip, both ways between Tianshou and vcollect, infos included).
- test_buffer.py: ``test_replaybuffer``'s infos (``b.info.a``, keys appearing later), ``test_ignore_obs_next``
  (Dict observations and actions, infos stacked), ``test_stack`` (without its ``save_only_last_obs`` buffer),
  ``test_update`` and the manager's refusal to be updated.
- test_returns.py: ``test_episodic_returns`` (Monte Carlo and GAE), ``test_nstep_returns``,
  ``test_nstep_returns_with_timelimit``. Upstream's reference n-step function reads truncation from
  ``buffer.info["TimeLimit.truncated"]``; its port reads ``buffer.truncated`` (the same flags, which the rings
  keep as a column).

Out of scope, and why: string observations (rings store numbers), ``test_custom_key`` (keys other than
Tianshou's reserved ones), ``CachedReplayBuffer`` / ``set_batch`` / ``dropnull`` / pickling (Tianshou's own
storage management), ``PrioritizedReplayBuffer`` / ``SegmentTree`` (vcollect has its own prioritized ring), the
HER buffers (tests/test_hindsight.py), ``save_only_last_obs`` and multi-dimensional rewards.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np
import pytest

pytest.importorskip("tianshou")
torch = pytest.importorskip("torch")

import tianshou.data as ts  # noqa: E402
from tianshou.algorithm import Algorithm  # noqa: E402
from tianshou.data import Batch, to_numpy  # noqa: E402

from vcollect.errors import UnsupportedBufferMethodError  # noqa: E402
from vcollect.tianshou import ReplayBuffer, VectorReplayBuffer  # noqa: E402


def test_replaybuffer_add_and_prev_next() -> None:
    b = ReplayBuffer(size=10)
    assert b.sample_indices(-1).tolist() == []
    ptr, ep_rew, ep_len, ep_idx = b.add(Batch(obs=1, act=1, rew=1, terminated=1, truncated=0, obs_next=7))
    assert b.obs[0] == 1
    assert b.done[0]
    assert b.terminated[0]
    assert not b.truncated[0]
    assert b.obs_next[0] == 7
    assert np.all(b.obs[1:] == 0)
    assert ptr.shape == (1,) and ptr[0] == 0
    assert ep_rew.shape == (1,) and ep_rew[0] == 1
    assert ep_len.shape == (1,) and ep_len[0] == 1
    assert ep_idx.shape == (1,) and ep_idx[0] == 0
    batch = Batch(obs=2, act=2, rew=2, terminated=0, truncated=0, obs_next=8)
    b.add(batch)
    # batch-style adding, len(batch) == 1
    batch.terminated = np.array([False])
    batch.truncated = np.array([True])
    stacked = Batch.stack([batch])
    ptr, ep_rew, ep_len, ep_idx = b.add(stacked, buffer_ids=[0])
    assert ptr.shape == (1,) and ptr[0] == 2
    assert ep_rew.shape == (1,) and ep_rew[0] == 4
    assert ep_len.shape == (1,) and ep_len[0] == 2
    assert ep_idx.shape == (1,) and ep_idx[0] == 1
    with pytest.raises(IndexError):
        b[22]
    assert np.all(b.prev(np.array([0, 1, 2])) == [0, 1, 1])
    assert np.all(b.next(np.array([0, 1, 2])) == [0, 2, 2])
    b.add(stacked, buffer_ids=[0])
    assert np.all(b.prev(np.array([0, 1, 2, 3])) == [0, 1, 1, 3])
    assert np.all(b.next(np.array([0, 1, 2, 3])) == [0, 2, 2, 3])


def test_replaybuffermanager() -> None:
    buf = VectorReplayBuffer(20, 4)
    batch = Batch(obs=[1, 2, 3], act=[1, 2, 3], rew=[1, 2, 3], terminated=[0, 0, 1], truncated=[0, 0, 0])
    ptr, ep_rew, ep_len, ep_idx = buf.add(batch, buffer_ids=[0, 1, 2])
    assert np.all(ep_len == [0, 0, 1])
    assert np.all(ep_rew == [0, 0, 3])
    assert np.all(ptr == [0, 5, 10])
    assert np.all(ep_idx == [0, 5, 10])
    indices = buf.sample_indices(11000)
    assert np.bincount(indices)[[0, 5, 10]].min() >= 3000  # uniform sample
    batch, indices = buf.sample(0)
    assert np.allclose(indices, [0, 5, 10])
    assert np.allclose(buf.prev(indices), indices)
    assert np.allclose(buf.next(indices), indices)
    assert np.allclose(buf.unfinished_index(), [0, 5])
    buf.add(Batch(obs=[4], act=[4], rew=[4], terminated=[1], truncated=[0]), buffer_ids=[3])
    assert np.allclose(buf.unfinished_index(), [0, 5])
    batch, indices = buf.sample(10)
    batch, indices = buf.sample(0)
    assert np.allclose(indices, [0, 5, 10, 15])
    assert np.allclose(buf.prev(indices), indices)
    assert np.allclose(buf.next(indices), indices)
    data = np.array([0, 0, 0, 0])
    buf.add(Batch(obs=data, act=data, rew=data, terminated=data, truncated=data), buffer_ids=[0, 1, 2, 3])
    buf.add(Batch(obs=data, act=data, rew=data, terminated=1 - data, truncated=data), buffer_ids=[0, 1, 2, 3])
    assert len(buf) == 12
    buf.add(Batch(obs=data, act=data, rew=data, terminated=data, truncated=data), buffer_ids=[0, 1, 2, 3])
    buf.add(Batch(obs=data, act=data, rew=data, terminated=[0, 1, 0, 1], truncated=data), buffer_ids=[0, 1, 2, 3])
    assert len(buf) == 20
    indices = buf.sample_indices(120000)
    assert np.bincount(indices).min() >= 5000
    batch, indices = buf.sample(10)
    indices = buf.sample_indices(0)
    assert np.allclose(indices, np.arange(len(buf)))
    assert np.allclose(buf.done, [0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1])
    assert np.allclose(buf.prev(indices), [0, 0, 1, 3, 3, 5, 5, 6, 8, 8, 10, 11, 11, 13, 13, 15, 16, 16, 18, 18])
    assert np.allclose(buf.next(indices), [1, 2, 2, 4, 4, 6, 7, 7, 9, 9, 10, 12, 12, 14, 14, 15, 17, 17, 19, 19])
    assert np.allclose(buf.unfinished_index(), [4, 14])
    ptr, ep_rew, ep_len, ep_idx = buf.add(
        Batch(obs=[1], act=[1], rew=[1], terminated=[1], truncated=[0]), buffer_ids=[2]
    )
    assert np.all(ep_len == [3])
    assert np.all(ep_rew == [1])
    assert np.all(ptr == [10])
    assert np.all(ep_idx == [13])
    assert np.allclose(buf.unfinished_index(), [4])
    indices = np.array(sorted(buf.sample_indices(0)))
    assert np.allclose(indices, np.arange(len(buf)))
    assert np.allclose(buf.prev(indices), [0, 0, 1, 3, 3, 5, 5, 6, 8, 8, 14, 11, 11, 13, 13, 15, 16, 16, 18, 18])
    assert np.allclose(buf.next(indices), [1, 2, 2, 4, 4, 6, 7, 7, 9, 9, 10, 12, 12, 14, 10, 15, 17, 17, 19, 19])
    # corner case: list, int and -1
    assert buf.prev(-1) == buf.prev(np.array([buf.maxsize - 1]))[0]
    assert buf.next(-1) == buf.next(np.array([buf.maxsize - 1]))[0]
    assert buf.sample_indices(-1).tolist() == []


def _dummy_rollout_batch() -> Batch:
    return Batch(obs=np.arange(2), obs_next=np.arange(2), act=np.arange(5), rew=1, terminated=False,
                 truncated=False, done=False, info={})


def test_get_replay_buffer_indices() -> None:
    buffer = ReplayBuffer(5)
    for _ in range(5):
        buffer.add(_dummy_rollout_batch())
    assert np.array_equal(buffer.get_buffer_indices(0, 3), [0, 1, 2])
    assert np.array_equal(buffer.get_buffer_indices(3, 2), [3, 4, 0, 1])
    assert np.array_equal(buffer.get_buffer_indices(0, 5), np.arange(5))


def test_get_vector_replay_buffer_indices() -> None:
    stacked_batch = Batch.stack([_dummy_rollout_batch(), _dummy_rollout_batch()])
    buffer = VectorReplayBuffer(10, 2)
    for _ in range(5):
        buffer.add(stacked_batch)
    assert np.array_equal(buffer.get_buffer_indices(0, 3), [0, 1, 2])
    assert np.array_equal(buffer.get_buffer_indices(3, 2), [3, 4, 0, 1])
    assert np.array_equal(buffer.get_buffer_indices(6, 9), [6, 7, 8])
    assert np.array_equal(buffer.get_buffer_indices(8, 7), [8, 9, 5, 6])
    with pytest.raises(ValueError):
        buffer.get_buffer_indices(3, 6)
    with pytest.raises(ValueError):
        buffer.get_buffer_indices(6, 3)


def test_from_data(tmp_path: Any) -> None:
    obs_data = np.ndarray((10, 3, 3), dtype="uint8")
    for i in range(10):
        obs_data[i] = i * np.ones((3, 3), dtype="uint8")
    obs_next_data = np.zeros_like(obs_data)
    obs_next_data[:-1] = obs_data[1:]
    with h5py.File(tmp_path / "data.hdf5", "w") as f:
        obs = f.create_dataset("obs", data=obs_data)
        act = f.create_dataset("act", data=np.arange(10, dtype="int32"))
        rew = f.create_dataset("rew", data=np.arange(10, dtype="float32"))
        terminated = f.create_dataset("terminated", data=np.zeros(10, dtype="bool"))
        truncated = f.create_dataset("truncated", data=np.zeros(10, dtype="bool"))
        done = f.create_dataset("done", data=np.zeros(10, dtype="bool"))
        obs_next = f.create_dataset("obs_next", data=obs_next_data)
        buf = VectorReplayBuffer.from_data(obs, act, rew, terminated, truncated, done, obs_next)
    assert len(buf) == 10
    batch = buf[3]
    assert isinstance(batch.obs, np.ndarray)
    assert np.array_equal(batch.obs, 3 * np.ones((3, 3), dtype="uint8"))
    assert batch.act == 3
    assert batch.rew == 3.0
    assert not batch.done
    assert isinstance(batch.obs_next, np.ndarray)
    assert np.array_equal(batch.obs_next, 4 * np.ones((3, 3), dtype="uint8"))


def _filled_tianshou(size: int = 100) -> Any:
    """test_multibuf_hdf5's vector buffer (without infos and with scalar rewards), then wrapped around."""
    buf = ts.VectorReplayBuffer(size * 4, 4)
    for i in range(4):
        step = {"obs": Batch(index=np.array([i])), "act": i, "rew": 1.0, "terminated": i % 3 == 2, "truncated": False,
                "obs_next": Batch(index=np.array([i + 1]))}
        buf.add(Batch.stack([step, step, step]), buffer_ids=[0, 1, 2])
    small = ts.VectorReplayBuffer(12, 3)
    for i in range(7):
        small.add(Batch(obs=np.full((3, 2), i, float), act=np.array([i, i, i]), rew=np.array([1.0, 2, 3]),
                        terminated=np.array([i % 3 == 2] * 3), truncated=np.zeros(3, bool),
                        obs_next=np.full((3, 2), i + 1, float)))
    return buf, small


@pytest.mark.parametrize("which", [0, 1])
def test_hdf5_round_trips(tmp_path: Any, which: int) -> None:
    theirs = _filled_tianshou()[which]
    theirs.save_hdf5(str(tmp_path / "tianshou.hdf5"))
    ours = VectorReplayBuffer.load_hdf5(str(tmp_path / "tianshou.hdf5"))
    assert len(ours) == len(theirs)
    assert ours.maxsize == theirs.maxsize and ours.stack_num == theirs.stack_num
    indices = theirs.sample_indices(0)
    assert np.array_equal(ours.sample_indices(0), indices)
    assert np.allclose(ours.act, theirs.act)
    for key in ("rew", "terminated", "truncated", "done"):
        assert np.array_equal(getattr(ours, key), getattr(theirs, key)), key
    assert np.array_equal(ours.prev(indices), theirs.prev(indices))
    assert np.array_equal(ours.next(indices), theirs.next(indices))
    assert np.array_equal(ours.unfinished_index(), theirs.unfinished_index())
    assert np.array_equal(to_numpy(ours[indices].obs_next), to_numpy(theirs[indices].obs_next))
    # and back: a file vcollect saves loads in Tianshou as the same buffer, which goes on adding as it would
    ours.save_hdf5(str(tmp_path / "vcollect.hdf5"))
    again = type(theirs).load_hdf5(str(tmp_path / "vcollect.hdf5"))
    assert len(again) == len(theirs)
    assert np.array_equal(again.sample_indices(0), indices)
    assert np.array_equal(again.prev(indices), theirs.prev(indices))
    assert np.array_equal(again.unfinished_index(), theirs.unfinished_index())
    step = theirs[indices[:1]]
    n = theirs.buffer_num
    more = Batch.stack([step[0]] * n)
    again.add(more)
    theirs.add(more)
    assert np.allclose(again.act, theirs.act)
    assert np.array_equal(again.done, theirs.done)


def test_unimplemented_member_names_itself_and_version() -> None:
    buf = VectorReplayBuffer(20, 2)
    assert not hasattr(buf, "update_weight")  # Tianshou's algorithms test prioritized replay this way
    with pytest.raises(UnsupportedBufferMethodError, match=r"VectorReplayBuffer\.set_beta .*vcollect \d"):
        buf.set_beta(0.4)


# ------------------------------------------------------------------ test_returns.py


def _episodic(batch: Batch, size: int = 20, v: np.ndarray | None = None, **kw: Any) -> np.ndarray:
    buf = ReplayBuffer(size)
    for b in iter(batch):
        b.obs = b.act = 1
        buf.add(b)
    returns, _ = Algorithm.compute_episodic_return(batch, buf, buf.sample_indices(0), v, **kw)
    return returns


def test_episodic_returns() -> None:
    batch = Batch(
        terminated=np.array([1, 0, 0, 1, 0, 0, 0, 1.0]),
        truncated=np.array([0, 0, 0, 0, 0, 1, 0, 0]),
        rew=np.array([0, 1, 2, 3, 4, 5, 6, 7.0]),
    )
    assert np.allclose(_episodic(batch, gamma=0.1, gae_lambda=1), [0, 1.23, 2.3, 3, 4.5, 5, 6.7, 7])
    batch = Batch(terminated=np.array([0, 1, 0, 1, 0, 1, 0.0]), truncated=np.zeros(7), rew=np.array([7, 6, 1, 2, 3, 4, 5.0]))
    assert np.allclose(_episodic(batch, gamma=0.1, gae_lambda=1), [7.6, 6, 1.2, 2, 3.4, 4, 5])
    batch = Batch(terminated=np.array([0, 1, 0, 1, 0, 0, 1.0]), truncated=np.zeros(7), rew=np.array([7, 6, 1, 2, 3, 4, 5.0]))
    assert np.allclose(_episodic(batch, gamma=0.1, gae_lambda=1), [7.6, 6, 1.2, 2, 3.45, 4.5, 5])
    rew = np.array([101, 102, 103.0, 200, 104, 105, 106, 201, 107, 108, 109, 202])
    v = np.array([2.0, 3.0, 4, -1, 5.0, 6.0, 7, -2, 8.0, 9.0, 10, -3])
    batch = Batch(terminated=np.array([0, 0, 0, 1.0, 0, 0, 0, 1, 0, 0, 0, 1]), truncated=np.zeros(12), rew=rew)
    ground_truth = [454.8344, 376.1143, 291.298, 200.0, 464.5610, 383.1085, 295.387, 201.0, 474.2876, 390.1027,
                    299.476, 202.0]
    assert np.allclose(_episodic(batch, v=v, gamma=0.99, gae_lambda=0.95), ground_truth)
    batch = Batch(terminated=np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
                  truncated=np.array([0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]), rew=rew)
    ground_truth = [454.0109, 375.2386, 290.3669, 199.01, 462.9138, 381.3571, 293.5248, 199.02, 474.2876, 390.1027,
                    299.476, 202.0]
    assert np.allclose(_episodic(batch, v=v, gamma=0.99, gae_lambda=0.95), ground_truth)


def target_q_fn(buffer: Any, indices: np.ndarray) -> torch.Tensor:
    indices = buffer.next(indices)  # the next reward
    return torch.tensor(-buffer.rew[indices], dtype=torch.float32)


def target_q_fn_multidim(buffer: Any, indices: np.ndarray) -> torch.Tensor:
    return target_q_fn(buffer, indices).unsqueeze(1).repeat(1, 51)


def compute_nstep_return_base(nstep: int, gamma: float, buffer: Any, indices: np.ndarray) -> np.ndarray:
    """Upstream's reference, reading truncation from ``buffer.truncated`` (the rings store no infos)."""
    returns = np.zeros_like(indices, dtype=float)
    buf_len = len(buffer)
    for i in range(len(indices)):
        flag, rew = False, 0.0
        real_step_n = nstep
        for n in range(nstep):
            idx = (indices[i] + n) % buf_len
            rew += buffer.rew[idx] * gamma**n
            if buffer.done[idx]:
                if not buffer.truncated[idx]:
                    flag = True
                real_step_n = n + 1
                break
        if not flag:
            idx = (indices[i] + real_step_n - 1) % buf_len
            rew += to_numpy(target_q_fn(buffer, idx)) * gamma**real_step_n
        returns[i] = rew
    return returns


def _nstep(buf: Any, n_step: int, fn: Any = target_q_fn) -> np.ndarray:
    batch, indices = buf.sample(0)
    out = Algorithm.compute_nstep_return(batch, buf, indices, fn, gamma=0.1, n_step=n_step).pop("returns")
    return to_numpy(out)


@pytest.mark.parametrize("timelimit", [False, True])
def test_nstep_returns(timelimit: bool) -> None:
    buf = ReplayBuffer(10)
    for i in range(12):
        terminated = i % 4 == 3 and not (timelimit and i == 3)
        buf.add(Batch(obs=0, act=0, rew=i + 1, terminated=terminated, truncated=timelimit and i == 3))
    batch, indices = buf.sample(0)
    assert np.allclose(indices, [2, 3, 4, 5, 6, 7, 8, 9, 0, 1])
    expected = {
        1: [2.6, 3.6 if timelimit else 4, 4.4, 5.3, 6.2, 8, 8, 8.9, 9.8, 12],
        2: [3.36 if timelimit else 3.4, 3.6 if timelimit else 4, 5.53, 6.62, 7.8, 8, 9.89, 10.98, 12.2, 12],
        10: [3.36 if timelimit else 3.4, 3.6 if timelimit else 4, 5.678, 6.78, 7.8, 8, 10.122, 11.22, 12.2, 12],
    }
    for n_step, values in expected.items():
        returns = _nstep(buf, n_step).reshape(-1)
        assert np.allclose(returns, values), (n_step, returns)
        assert np.allclose(returns, compute_nstep_return_base(n_step, 0.1, buf, indices))
        assert np.allclose(_nstep(buf, n_step, target_q_fn_multidim), returns[:, np.newaxis])


# ------------------------------------------------------------------ infos, update, frame stacks


def test_replaybuffer_infos() -> None:
    """test_replaybuffer's info part (numeric next observations in place of its strings)."""
    b = ReplayBuffer(size=10)
    b.add(Batch(obs=1, act=1, rew=1, terminated=1, truncated=0, obs_next=7, info={"a": 3, "b": {"c": 5.0}}))
    assert b.info.a[0] == 3
    assert b.info.a.dtype == int
    assert np.all(b.info.a[1:] == 0)
    assert b.info.b.c[0] == 5.0
    assert b.info.b.c.dtype == float
    assert np.all(b.info.b.c[1:] == 0.0)
    # keys that pop up later get their own columns; a step without a key reads 0 for it
    batch = Batch(obs=2, act=2, rew=2, terminated=0, truncated=0, obs_next=8, info={"a": 4, "d": {"e": -np.inf}})
    b.add(batch)
    info_keys = ["a", "b", "d"]
    assert set(b.info.keys()) == set(info_keys)
    assert b.info.a[1] == 4
    assert b.info.b.c[1] == 0
    assert b.info.d.e[1] == -np.inf
    batch.terminated = np.array([False])
    batch.truncated = np.array([True])
    batch.info.e = np.zeros([1, 4])
    stacked = Batch.stack([batch])
    ptr, ep_rew, ep_len, ep_idx = b.add(stacked, buffer_ids=[0])
    assert ptr[0] == 2 and ep_rew[0] == 4 and ep_len[0] == 2 and ep_idx[0] == 1
    assert set(b.info.keys()) == {*info_keys, "e"}
    assert b.info.e.shape == (b.maxsize, 1, 4)
    # and indexing returns each transition's info
    sampled = b[np.array([0, 2])]
    assert np.array_equal(sampled.info.a, [3, 4])
    assert np.array_equal(sampled.info.b.c, [5.0, 0.0])
    assert np.array_equal(sampled.info.d.e, [0, -np.inf])


def test_ignore_obs_next() -> None:
    """Upstream's test_ignore_obs_next: Dict observations and actions, infos stacked with the observations."""
    size = 10
    buf = ReplayBuffer(size, ignore_obs_next=True)
    for i in range(size):
        buf.add(Batch(
            obs={"mask1": np.array([i, 1, 1, 0, 0]), "mask2": np.array([i + 4, 0, 1, 0, 0]), "mask": i},
            act={"act_id": i, "position_id": i + 3}, rew=i, terminated=i % 3 == 0, truncated=False,
            info={"if": i},
        ))
    indices = np.arange(len(buf))
    orig = np.arange(len(buf))
    data = buf[indices]
    data2 = buf[indices]
    assert isinstance(data, Batch)
    assert np.allclose(indices, orig)
    assert np.allclose(data.obs_next.mask, data2.obs_next.mask)
    assert np.allclose(data.obs_next.mask, [0, 2, 3, 3, 5, 6, 6, 8, 9, 9])
    buf.stack_num = 4
    data = buf[indices]
    data2 = buf[indices]
    assert np.allclose(data.obs_next.mask, data2.obs_next.mask)
    assert np.allclose(data.obs_next.mask, np.array([
        [0, 0, 0, 0], [1, 1, 1, 2], [1, 1, 2, 3], [1, 1, 2, 3], [4, 4, 4, 5],
        [4, 4, 5, 6], [4, 4, 5, 6], [7, 7, 7, 8], [7, 7, 8, 9], [7, 7, 8, 9],
    ]))
    assert np.allclose(data["info"]["if"], data2["info"]["if"])
    assert np.allclose(data["info"]["if"], np.array([
        [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 2], [1, 1, 2, 3], [4, 4, 4, 4],
        [4, 4, 4, 5], [4, 4, 5, 6], [7, 7, 7, 7], [7, 7, 7, 8], [7, 7, 8, 9],
    ]))


def _walk_right(size: int, state: int) -> tuple[np.ndarray, Any]:
    """Upstream's MoveToRightEnv of ``size`` reset to ``state``: (first observation, the env)."""
    from tests.tianshou_envs import MoveToRightEnv

    env = MoveToRightEnv(size)
    obs, _ = env.reset(options={"state": state})
    return obs, env


def test_stack() -> None:
    """Upstream's test_stack (the buffers without save_only_last_obs, which the adapter refuses)."""
    size, bufsize, stack_num = 5, 9, 4
    obs, env = _walk_right(size, 1)
    buf = ReplayBuffer(bufsize, stack_num=stack_num)
    buf2 = ReplayBuffer(bufsize, stack_num=stack_num, sample_avail=True)
    for _ in range(16):
        obs_next, rew, terminated, truncated, info = env.step(1)
        for b in (buf, buf2):
            b.add(Batch(obs=obs, act=1, rew=rew, terminated=terminated, truncated=truncated,
                        info={"key": info["key"]}))
        obs = obs_next
        if terminated or truncated:
            obs, info = env.reset(options={"state": 1})
    indices = np.arange(len(buf))
    assert np.allclose(
        buf.get(indices, "obs")[..., 0],
        [
            [1, 1, 1, 2],
            [1, 1, 2, 3],
            [1, 2, 3, 4],
            [1, 1, 1, 1],
            [1, 1, 1, 2],
            [1, 1, 2, 3],
            [1, 2, 3, 4],
            [4, 4, 4, 4],
            [1, 1, 1, 1],
        ],
    )
    _, indices = buf2.sample(0)
    assert indices.tolist() == [2, 6]
    _, indices = buf2.sample(1)
    assert indices[0] in [2, 6]
    batch, indices = buf2.sample(-1)  # neg bsz -> no data
    assert indices.tolist() == []
    assert len(batch) == 0
    with pytest.raises(IndexError):
        buf[bufsize * 2]
    with pytest.raises(ValueError, match="save_only_last_obs"):
        ReplayBuffer(bufsize, stack_num=stack_num, save_only_last_obs=True)


def test_update() -> None:
    buf1 = ReplayBuffer(4, stack_num=2)
    buf2 = ReplayBuffer(4, stack_num=2)
    for i in range(5):
        buf1.add(Batch(obs=np.array([i]), act=float(i), rew=i * i, terminated=i % 2 == 0, truncated=False,
                       info={"incident": i}))
    assert len(buf1) > len(buf2)
    buf2.update(buf1)
    assert len(buf1) == len(buf2)
    assert (buf2.obs[0] == buf1.obs[1]).all()
    assert (buf2.obs[-1] == buf1.obs[0]).all()
    # beyond upstream: the moved transitions keep their rewards, flags, infos and episode links
    assert np.array_equal(buf2.rew, [1, 4, 9, 16])
    assert np.array_equal(buf2.done, [False, True, False, True])
    assert np.array_equal(buf2.info.incident, [1, 2, 3, 4])
    assert np.array_equal(buf2.prev(np.arange(4)), [0, 0, 2, 2])
    assert np.array_equal(buf2.next(np.arange(4)), [1, 1, 3, 3])
    assert np.array_equal(buf2.stack_num, 2) and buf1.stack_num == 2
    empty = ReplayBuffer(4)
    assert empty.update(empty).tolist() == []


def test_update_from_tianshous_buffer() -> None:
    theirs = ts.ReplayBuffer(6)
    for i in range(8):
        theirs.add(Batch(obs=np.array([i]), act=i, rew=float(i), terminated=i % 3 == 2, truncated=False,
                         obs_next=np.array([i + 1]), info={"k": i}))
    ours = ReplayBuffer(10)
    updated = ours.update(theirs)
    assert updated.tolist() == [0, 1, 2, 3, 4, 5]
    order = theirs.sample_indices(0)
    assert np.array_equal(ours.act[:6], theirs.act[order])
    assert np.array_equal(ours.done[:6], theirs.done[order])
    assert np.array_equal(ours.info.k[:6], theirs.info.k[order])
    assert np.array_equal(ours[np.arange(6)].obs_next, theirs[order].obs_next)


def test_vector_buffer_cannot_be_updated() -> None:
    """Upstream's test_replaybuffermanager: a ReplayBufferManager cannot be updated."""
    buf = VectorReplayBuffer(20, 4)
    buf.add(Batch(obs=[1, 2, 3], act=[1, 2, 3], rew=[1, 2, 3], terminated=[0, 0, 1], truncated=[0, 0, 0]),
            buffer_ids=[0, 1, 2])
    with pytest.raises(NotImplementedError):
        buf.update(buf)
    with pytest.raises(UnsupportedBufferMethodError, match=r"VectorReplayBuffer\.update .*vcollect \d"):
        buf.update(buf)


def test_hdf5_infos_from_vcollect_load_in_tianshou(tmp_path: Any) -> None:
    ours = VectorReplayBuffer(6, 2)
    for i in range(4):
        ours.add(Batch(obs=np.array([[i], [10 + i]], float), act=np.array([i, i]), rew=np.array([1.0, 2.0]),
                       terminated=np.array([i == 1, False]), truncated=np.zeros(2, bool),
                       obs_next=np.array([[i + 1], [11 + i]], float),
                       info={"a": np.array([i, 10 + i]), "b": {"c": np.array([0.5 * i, -1.5])}}))
    ours.save_hdf5(str(tmp_path / "vcollect.hdf5"))
    theirs = ts.VectorReplayBuffer.load_hdf5(str(tmp_path / "vcollect.hdf5"))
    # 3 slots per sub-buffer: the 4th step of each took its first slot again
    assert np.array_equal(theirs.info.a, [3, 1, 2, 13, 11, 12])
    assert np.array_equal(theirs.info.b.c, [1.5, 0.5, 1.0, -1.5, -1.5, -1.5])
    assert np.array_equal(theirs[np.array([1, 5])].info.a, [1, 12])
    # Tianshou goes on adding to it, its infos beside the loaded ones
    theirs.add(Batch(obs=np.zeros((2, 1)), act=np.array([9, 9]), rew=np.zeros(2), terminated=np.zeros(2, bool),
                     truncated=np.zeros(2, bool), obs_next=np.zeros((2, 1)),
                     info={"a": np.array([7, 8]), "b": {"c": np.array([2.0, 3.0])}}))
    assert np.array_equal(theirs.info.a, [3, 7, 2, 13, 8, 12])


def test_hdf5_infos_from_tianshou_load_in_vcollect(tmp_path: Any) -> None:
    theirs = ts.VectorReplayBuffer(8, 2)
    for i in range(3):
        theirs.add(Batch(obs=np.array([[i], [5 + i]], float), act=np.array([i, 1]), rew=np.array([1.0, 0.0]),
                         terminated=np.array([False, i == 0]), truncated=np.zeros(2, bool),
                         obs_next=np.array([[i + 1], [6 + i]], float),
                         info={"key": np.array([2 * i, 3 * i]), "env_id": np.array([0, 1]),
                               "nested": {"x": np.array([[i, -i], [i, i]], np.float32)}}))
    theirs.save_hdf5(str(tmp_path / "tianshou.hdf5"))
    ours = VectorReplayBuffer.load_hdf5(str(tmp_path / "tianshou.hdf5"))
    assert np.array_equal(ours.info.key, [0, 2, 4, 0, 0, 3, 6, 0])
    assert np.array_equal(ours.info.env_id, [0, 0, 0, 0, 1, 1, 1, 0])
    assert ours.info.nested.x.dtype == np.float32
    assert np.array_equal(ours.info.nested.x[:, 1], [0, -1, -2, 0, 0, 1, 2, 0])
    sampled = ours[np.array([2, 5])]
    assert np.array_equal(sampled.info.key, [4, 3])
    assert np.array_equal(sampled.info.nested.x, [[2, -2], [1, 1]])
    # and back again, unchanged
    ours.save_hdf5(str(tmp_path / "again.hdf5"))
    again = ts.VectorReplayBuffer.load_hdf5(str(tmp_path / "again.hdf5"))
    assert np.array_equal(again.info.key, [0, 2, 4, 0, 0, 3, 6, 0])
    assert np.array_equal(again.info.nested.x, theirs.info.nested.x)


@pytest.mark.filterwarnings("ignore:n_step=")
def test_prev_next_unfinished_index_follow_tianshous_through_wraps_and_cut_episodes() -> None:
    """prev, next, unfinished_index and sample_indices, kept up to date as slots fill, equal those of Tianshou's
    own Collector and VectorReplayBuffer given the same steps, across wrap-arounds, emptied buffers and
    episodes cut by env resets (Tianshou's next goes on into the next episode's first step)."""
    from tianshou.env import DummyVectorEnv

    from tests.tianshou_envs import MoveToRightEnv
    from vcollect.tianshou import Collector

    class Alternating:
        def __init__(self) -> None:
            self.calls = 0

        def __call__(self, obs: Any, state: Any = None) -> tuple[np.ndarray, Any]:
            self.calls += 1
            return ((np.arange(len(obs)) + self.calls) % 3 > 0).astype(np.int64), state

    class AlternatingBatch(Alternating):
        """The same actions as a Tianshou policy's result (Tianshou's Collector calls ``policy(batch, state)``)."""

        training = False

        def train(self, mode: bool = True) -> Any:
            return self

        def __call__(self, batch: Any, state: Any = None) -> Any:  # type: ignore[override]
            return Batch(act=super().__call__(batch.obs, state)[0])

        def add_exploration_noise(self, act: Any, batch: Any) -> Any:
            return act

        def map_action(self, act: Any) -> Any:
            return act

    def envs() -> DummyVectorEnv:
        return DummyVectorEnv([lambda size=size: MoveToRightEnv(size) for size in (2, 3, 7)])

    ours = VectorReplayBuffer(3 * 8, 3)
    theirs = ts.VectorReplayBuffer(3 * 8, 3)
    collector = Collector(Alternating(), envs(), ours)
    reference = ts.Collector(AlternatingBatch(), envs(), theirs)  # type: ignore[arg-type]
    collector.reset()
    reference.reset()
    cut = set()
    for i in range(40):
        collector.collect(n_step=1 + i % 7)
        reference.collect(n_step=1 + i % 7)
        if i % 9 == 4:
            collector.reset_env()  # cuts the running episodes
            reference.reset_env()
        if i in (12, 25):
            collector.reset_buffer()
            reference.reset_buffer()
        held = theirs.sample_indices(0)
        assert np.array_equal(ours.sample_indices(0), held), i
        assert np.array_equal(ours.done[held], theirs.done[held]), i  # (Tianshou keeps stale flags in emptied slots)
        assert np.array_equal(ours.next(held), theirs.next(held)), i
        assert np.array_equal(ours.prev(held), theirs.prev(held)), i
        assert np.array_equal(ours.unfinished_index(), theirs.unfinished_index()), i
        if len(theirs):
            assert np.array_equal(ours.sample_indices(16), theirs.sample_indices(16)), i
        cut.update(held[(ours.next(held) != held) & (ours[ours.next(held)].obs[:, 0] == 0)].tolist())
    assert len(ours) == 24 and cut  # wrapped around, with steps followed by another episode's first
