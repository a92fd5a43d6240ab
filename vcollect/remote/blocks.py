"""Block hashes of a shard on a remote, so a reader can fetch and check byte ranges of it instead of all of it.

A manifest line holds one SHA-256 for a whole shard: a reader can check a range of the shard only after
fetching all of it. An upload therefore also writes, beside each shard, the SHA-256 of each fixed-size block
of it (``blocks/<shard>.json``: the shard's size and whole SHA-256, which tie the list to its manifest line,
the block size and the blocks' digests). A dataset read in place fetches the blocks a read touches, checks
each against its digest before anything reads it, and fetches a shard whole only where the remote holds no
block list for it (datasets uploaded without one) or one that does not match its manifest line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BLOCKS_DIR", "BLOCK_BYTES", "BlockHashes", "blocks_name", "hash_file"]

#: The folder of a remote dataset holding its shards' block lists.
BLOCKS_DIR = "blocks"
#: Bytes per block: a sampled row costs one or two blocks of transfer (an 84x84 frame is 7 KB).
BLOCK_BYTES = 64 << 10
_FORMAT = "vcollect-blocks-1"
_DIGEST = 32


def blocks_name(shard: str) -> str:
    """The file name of ``shard``'s block list in a remote dataset's ``blocks/`` folder."""
    return f"{shard}.json"


@dataclass(frozen=True)
class BlockHashes:
    """The SHA-256 of each ``block_bytes`` block of one file (the last block may be shorter).

    Attributes:
        size: The file's size in bytes.
        sha256: The whole file's SHA-256 (hex), as its manifest line records it.
        block_bytes: Bytes per block.
        digests: The blocks' SHA-256 digests, 32 bytes each, in file order.
    """

    size: int
    sha256: str
    block_bytes: int
    digests: bytes

    @property
    def num_blocks(self) -> int:
        """How many blocks the file has."""
        return -(-self.size // self.block_bytes)

    def block_size(self, index: int) -> int:
        """Bytes in block ``index`` (the last one may be shorter)."""
        return min(self.block_bytes, self.size - index * self.block_bytes)

    def matches(self, index: int, data: bytes | memoryview) -> bool:
        """Whether ``data`` is block ``index`` of the file (its size and SHA-256)."""
        if len(data) != self.block_size(index):
            return False
        return hashlib.sha256(data).digest() == self.digests[index * _DIGEST : (index + 1) * _DIGEST]

    def encode(self) -> bytes:
        """The block list as the remote stores it (JSON)."""
        return json.dumps({
            "format": _FORMAT, "size": self.size, "sha256": self.sha256, "block_bytes": self.block_bytes,
            "digests": self.digests.hex(),
        }).encode()

    @classmethod
    def decode(cls, data: bytes) -> BlockHashes:
        """Parse a block list written by :meth:`encode`.

        Args:
            data: The stored bytes.

        Returns:
            The block list.

        Raises:
            ValueError: The bytes are not a well-formed block list (the message says what is wrong).
        """
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise ValueError(f"not a block list of format {_FORMAT!r}")
        size, block_bytes, sha256, digests = doc.get("size"), doc.get("block_bytes"), doc.get("sha256"), doc.get("digests")
        if not isinstance(size, int) or not isinstance(block_bytes, int) or size < 0 or block_bytes < 1:
            raise ValueError("size or block_bytes is not a valid count")
        if not isinstance(sha256, str) or not isinstance(digests, str):
            raise ValueError("sha256 or digests is not text")
        try:
            raw = bytes.fromhex(digests)
        except ValueError:
            raise ValueError("digests is not hex") from None
        out = cls(size, sha256, block_bytes, raw)
        if len(raw) != out.num_blocks * _DIGEST:
            raise ValueError(f"{len(raw) // _DIGEST} digests for {out.num_blocks} blocks")
        return out


def hash_file(path: Path, block_bytes: int = BLOCK_BYTES) -> BlockHashes:
    """Read ``path`` once and hash it whole and block by block.

    Args:
        path: The file.
        block_bytes: Bytes per block.

    Returns:
        Its block list.
    """
    whole = hashlib.sha256()
    digests = bytearray()
    size = 0
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(block_bytes)
        view = memoryview(buffer)
        while True:
            n = 0
            while n < block_bytes:  # a whole block, however the reads come back
                got = f.readinto(view[n:])
                if not got:
                    break
                n += got
            if not n:
                break
            whole.update(view[:n])
            digests += hashlib.sha256(view[:n]).digest()
            size += n
    return BlockHashes(size, whole.hexdigest(), block_bytes, bytes(digests))
