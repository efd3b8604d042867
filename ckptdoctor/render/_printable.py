"""What rich prints for people, with every control character in it shown, never obeyed.

File names are the user's data, and a name may hold an escape sequence (``\\x1b]0;…`` retitles
the terminal, ``\\x1b[2J`` clears it): printed raw, a checkpoint folder would write to the
terminal of whoever inspects it. Styles come from rich as control segments and stay; only text
from the data is escaped. Loaded only where rich is (``render/console.py``).
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.segment import Segment

from ckptdoctor.quoting import has_control, printable


class _Shown:
    """A renderable whose text is rendered with its control characters escaped."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.inner, options):
            if segment.control or not has_control(segment.text):
                yield segment
            else:
                yield Segment(printable(segment.text), segment.style)


class ShowControls(RenderHook):
    """Installed on every console ckptdoctor prints on for people."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Shown(renderable) for renderable in renderables]
