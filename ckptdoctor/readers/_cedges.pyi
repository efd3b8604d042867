from collections.abc import Iterable

def read_edges(
    paths: Iterable[bytes], sizes: Iterable[int], head: int, tail: int, threads: int = 1
) -> list[bytes | tuple[bytes, bytes] | None]: ...
