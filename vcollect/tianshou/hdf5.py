"""Tianshou's HDF5 layout for the replay-buffer adapter: buffers saved by Tianshou load into vcollect's rings,
and buffers saved from the rings load in Tianshou.

The file is Tianshou's own (``ReplayBuffer.save_hdf5``: the buffer's attributes, its ``_meta`` Batch of
``obs``, ``act``, ``rew``, ``terminated``, ``truncated``, ``done``, ``obs_next`` and ``info`` in slot order):
saving builds the Tianshou buffer the rings' transitions stand for (same indices) and lets Tianshou write it;
loading lets Tianshou read it and adds its transitions with their infos, each sub-buffer's oldest first, to the
adapter, keeping their indices. Tianshou's ``from_data`` takes no infos, and neither does the adapter's.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np
import tianshou.data as ts

from vcollect.tianshou.batches import as_nested, batch_space

__all__ = ["fill_from_tianshou", "read_tianshou", "to_tianshou"]


def to_tianshou(buffer: Any) -> Any:
    """The Tianshou buffer (``ReplayBuffer`` for one sub-buffer taking unbatched steps, else
    ``VectorReplayBuffer``) holding ``buffer``'s transitions at the same indices.

    Args:
        buffer: A vcollect.tianshou VectorReplayBuffer.

    Returns:
        A new Tianshou buffer (its arrays are copies).
    """
    size, num = buffer.size, buffer.buffer_num
    options = dict(buffer.options)
    single = buffer.is_single
    target = ts.ReplayBuffer(size, **options) if single else ts.VectorReplayBuffer(size * num, num, **options)
    if len(buffer) == 0:
        return target
    whole = ts.Batch(
        obs=buffer.obs, act=buffer.act, rew=buffer.rew.copy(), terminated=buffer.terminated.copy(),
        truncated=buffer.truncated.copy(), done=buffer.done.copy(), obs_next=buffer.obs_next,
    )
    info = buffer.info
    if info.get_keys():  # each slot's info, as Tianshou's buffers keep it
        whole.info = info
    target.set_batch(whole)
    counts = buffer.layout.count
    lengths = buffer.layout.lengths
    subs = [target] if single else list(target.buffers)
    for env, sub in enumerate(subs):
        sub._size = int(lengths[env])
        sub._insertion_idx = int(counts[env] % size)
        sub.last_index = np.array([int(max(counts[env] - 1, 0) % size)])
    if not single:
        target._lengths = lengths.astype(target._lengths.dtype)
        target.last_index = np.arange(num) * size + np.maximum(counts - 1, 0) % size
    return target


def read_tianshou(path: str) -> Any:
    """The Tianshou buffer saved at ``path`` (a VectorReplayBuffer where the file holds sub-buffers).

    Args:
        path: An HDF5 file written by Tianshou's ``save_hdf5``.

    Returns:
        The Tianshou buffer.
    """
    with h5py.File(path, "r") as file:
        vector = "buffers" in file  # a VectorReplayBuffer keeps its sub-buffers
    return (ts.VectorReplayBuffer if vector else ts.ReplayBuffer).load_hdf5(path)


def layout_of(source: Any) -> tuple[int, int, bool]:
    """(slots per sub-buffer, sub-buffers, single) of a Tianshou buffer."""
    if isinstance(source, ts.ReplayBufferManager):
        return int(source.buffers[0].maxsize), int(source.buffer_num), False
    return int(source.maxsize), 1, True


def fill_from_tianshou(buffer: Any, source: Any) -> None:
    """Add a Tianshou buffer's transitions to an empty adapter of its layout, keeping their indices.

    Args:
        buffer: An empty vcollect.tianshou VectorReplayBuffer of ``source``'s size and sub-buffers.
        source: A Tianshou ReplayBuffer or VectorReplayBuffer.
    """
    size, _, single = layout_of(source)
    subs = [source] if single else list(source.buffers)
    offsets = [0] if single else [int(o) for o in source._offset]
    lengths = np.array([len(sub) for sub in subs])
    if lengths.sum() == 0:
        return
    meta = source._meta
    keys = set(meta.get_keys())
    obs, act = as_nested(meta.obs), as_nested(meta.act)
    info = as_nested(meta.info) if "info" in keys else {}
    buffer.ring.bind_spaces(batch_space(obs, "obs"), batch_space(act, "act"))
    buffer.reset()
    # each sub-buffer's transitions, oldest first, as global indices
    orders = [np.concatenate([np.arange(sub._insertion_idx, len(sub)), np.arange(sub._insertion_idx)]) + offset
              for sub, offset in zip(subs, offsets)]
    # the first slot a sub-buffer's oldest transition takes: its own (a full sub-buffer has wrapped)
    buffer.layout.count[:] = [int(order[0] - offset) if len(order) == size else 0 for order, offset in zip(orders, offsets)]
    for t in range(int(lengths.max())):
        ids = np.flatnonzero(lengths > t)
        idx = np.array([orders[env][t] for env in ids])
        nxt = idx if "obs_next" in keys else source.next(idx)
        step = ts.Batch(
            obs=_rows(obs, idx), act=_rows(act, idx), rew=np.asarray(meta.rew)[idx],
            terminated=np.asarray(meta.terminated)[idx], truncated=np.asarray(meta.truncated)[idx],
            obs_next=_rows(as_nested(meta.obs_next), nxt) if "obs_next" in keys else _rows(obs, nxt),
        )
        if info:
            step.info = ts.Batch(_rows(info, idx))
        buffer.add(step, buffer_ids=ids)


def _rows(value: Any, idx: np.ndarray) -> Any:
    if isinstance(value, dict):
        return {key: _rows(item, idx) for key, item in value.items()}
    return value[idx]
