"""Text leaves: how gymnasium ``Text`` values are held in arrays, checked, and written as UTF-8.

A Text leaf is held as fixed-width numpy unicode (``<U{max_length + 1}``), so rings, shared-memory rows
and gathers treat it like any other fixed-size leaf. The one character beyond ``max_length`` is
deliberate: numpy cuts a longer string to the width when it is written into a row, and with one spare
character a cut value is still longer than ``max_length`` and is refused by the checks instead of being
stored shortened. On disk a Text column holds UTF-8 strings (HDF5 strings with the UTF-8 character set).
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np
from gymnasium import spaces as gs

__all__ = ["ENCODING_ATTR", "TextRule", "decode_utf8", "encode_utf8", "stored_text_problem", "text_dtype"]

#: HDF5 column attribute naming the encoding of a byte-string column that holds text.
ENCODING_ATTR = "encoding"
#: Batches of at most this many values are checked as Python strings (see TextRule.holds).
_PYTHON_MAX = 64


def text_dtype(space: gs.Text) -> np.dtype[Any]:
    """The fixed-width unicode dtype a Text space's values are held in (one spare character, see above).

    TypeError for a charset holding NUL: fixed-width numpy strings drop trailing NULs, so such values could
    not be stored exactly."""
    if "\x00" in space.characters:
        raise TypeError(
            f"cannot store values of {space!r}: its charset holds NUL ('\\x00'), which fixed-width numpy "
            "strings (and HDF5) cannot keep at the end of a value; remove NUL from the charset"
        )
    return np.dtype(f"<U{int(space.max_length) + 1}")


class TextRule:
    """What a value of one Text space must be: a str of min_length..max_length characters of its charset.

    ``bad`` checks a whole batch on its code points with numpy (one table lookup per character), so the
    per-step observation check stays vectorised; ``explain`` says what is wrong with the first bad value.
    """

    __slots__ = ("space", "min_length", "max_length", "_table")

    def __init__(self, space: gs.Text) -> None:
        self.space = space
        self.min_length = int(space.min_length)
        self.max_length = int(space.max_length)
        codes = np.fromiter((ord(c) for c in space.characters), dtype=np.int64, count=len(space.characters))
        top = int(codes.max()) if codes.size else 0
        # table[code]: whether the code point is allowed; 0 (numpy's padding) is, and the last entry stands
        # for every code point beyond the charset's largest
        self._table = np.zeros(top + 2, dtype=bool)
        self._table[codes] = True
        self._table[0] = True
        self._table[-1] = False

    def bad(self, x: np.ndarray) -> np.ndarray:
        """A bool per value of ``x`` (a unicode array of any shape): True where the value is not in the space."""
        flat = np.ascontiguousarray(x).reshape(-1)
        width = flat.dtype.itemsize // 4
        lengths = np.strings.str_len(flat)
        bad = (lengths < self.min_length) | (lengths > self.max_length)
        if width:
            codes = flat.view(np.uint32).reshape(flat.size, width)
            allowed = self._table[np.minimum(codes, self._table.size - 1)]
            # a NUL inside a value is padding to numpy: fewer non-NUL characters than its length shows it
            bad |= ~allowed.all(axis=1) | (np.count_nonzero(codes, axis=1) != lengths)
        return bad.reshape(x.shape)

    def holds(self, x: np.ndarray) -> bool:
        """Whether every value of ``x`` (a unicode array) is in the space: what the per-step check asks.

        Up to ``_PYTHON_MAX`` values a pass over the Python strings (set containment, in C) is about ten
        times cheaper than numpy's fixed per-call costs; larger batches go through the code points at once.
        """
        if x.size <= _PYTHON_MAX:
            low, high, chars = self.min_length, self.max_length, self.space.character_set
            return all(low <= len(s) <= high and chars.issuperset(s) for s in x.reshape(-1).tolist())
        flat = np.ascontiguousarray(x).reshape(-1)
        width = flat.dtype.itemsize // 4
        if not width:
            return self.min_length == 0
        codes = flat.view(np.uint32).reshape(flat.size, width)
        if not self._table[np.minimum(codes, self._table.size - 1)].all():
            return False
        filled = codes != 0
        if (filled[:, 1:] & ~filled[:, :-1]).any():  # a NUL before a character: NUL is never in the charset
            return False
        counts = np.count_nonzero(filled, axis=1)
        return bool(counts.min() >= self.min_length and counts.max() <= self.max_length)

    def value_problem(self, value: Any) -> str | None:
        """What is wrong with one value (None if it is in the space), as a phrase to follow "it"."""
        if not isinstance(value, str):
            return f"is a {type(value).__name__}, not a str"
        n = len(value)
        if n > self.max_length:
            return f"has {n} characters, more than max_length {self.max_length}"
        if n < self.min_length:
            return f"has {n} characters, fewer than min_length {self.min_length}"
        outside = sorted(set(value) - self.space.character_set)
        if outside:
            return f"holds characters outside its charset: {''.join(outside)!r}"
        return None

    def explain(self, x: np.ndarray) -> str:
        """What is wrong with the first bad value of a 1-D batch (one value per row)."""
        rows = np.flatnonzero(self.bad(x))
        if not rows.size:
            return f"every value is in {self.space}"
        i = int(rows[0])
        value = str(x[i])
        problem = self.value_problem(value)
        if problem is None:  # NULs inside it, which numpy counts as padding
            problem = "holds NUL characters inside"
        elif len(value) == self.max_length + 1 and problem.startswith("has"):
            problem = f"has more than max_length {self.max_length} characters"  # cut to the row's width
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"element {i} ({shown!r}) is not in {self.space}: it {problem}"

    def write_problem(self, value: Any) -> str | None:
        """Why one value cannot be written into a row of this leaf (None if it can): not a str, too long to
        keep, or holding NUL (numpy would drop trailing NULs). Charset and min_length are left to the
        observation/action checks, like the bounds of other spaces."""
        if not isinstance(value, str):
            return f"a Text value must be a str, got {type(value).__name__}"
        if len(value) > self.max_length:
            return f"value has {len(value)} characters, more than max_length {self.max_length} of {self.space}"
        if "\x00" in value:
            return f"value holds NUL ('\\x00'), which {self.space} cannot store"
        return None


def stored_text_problem(space: gs.Text, arr: np.ndarray) -> str | None:
    """Why a column of values given to a store cannot be kept as values of ``space`` (None if it can): it
    must be numpy strings (numbers would be turned into text), every value in the space."""
    if arr.dtype.kind != "U":
        return f"has dtype {arr.dtype}, but {space} holds strings (a numpy unicode array, e.g. np.array(list_of_str))"
    rule = TextRule(space)
    if arr.size and bool(rule.bad(arr).any()):
        return rule.explain(arr.reshape(-1))
    return None


def encode_utf8(arr: np.ndarray) -> np.ndarray:
    """A unicode array as fixed-width UTF-8 bytes that h5py writes as HDF5 strings with the UTF-8 charset."""
    encoded = np.strings.encode(arr, "utf-8")
    width = max(encoded.dtype.itemsize, 1)
    return encoded.astype(h5py.string_dtype("utf-8", width))


def decode_utf8(arr: np.ndarray, dtype: np.dtype[Any] | None = None) -> np.ndarray:
    """UTF-8 bytes (fixed-width, or h5py's variable-length bytes/str objects) as a unicode array of ``dtype``."""
    if arr.dtype.kind == "O":
        values = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1).tolist()]
        out = np.array(values, dtype=dtype if dtype is not None else str).reshape(arr.shape)
    elif arr.dtype.kind == "S":
        out = np.strings.decode(arr.astype(np.bytes_, copy=False), "utf-8")
    else:
        out = arr
    return out if dtype is None else out.astype(dtype, copy=False)
