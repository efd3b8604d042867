from collections.abc import Iterable

from typing_extensions import Buffer

def read_edges(
    paths: Iterable[bytes], sizes: Iterable[int], head: int, tail: int, threads: int = 1
) -> list[bytes | tuple[bytes, bytes] | None]: ...
def scan_block(buffer: Buffer, length: int, size: int, mask: int, least: int, most: int, zeros: bool) -> tuple[int, bool]: ...
