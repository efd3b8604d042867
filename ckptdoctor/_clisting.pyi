from collections.abc import Callable, Container
from typing import TypeVar

E = TypeVar("E")

def list_folder(
    os_dir: str,
    shown_prefix: str,
    entry_type: Callable[..., E],
    display: Callable[[str], str],
    never: Container[str],
    skipped: Container[str],
) -> tuple[tuple[E, ...], list[tuple[str, str]]]: ...
