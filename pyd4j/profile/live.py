"""Live terminal view of a profiled job (rich): memory against limits and training progress."""

from __future__ import annotations

import time
from typing import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

from pyd4j.output import human_bytes


class LiveView:
    """Context manager whose `update` is the `on_sample` callback of profile_job."""

    def __init__(self, title: str, console: Console | None = None) -> None:
        self.title = title
        self.console = console or Console(stderr=True)
        self.live = Live(self._table({}), console=self.console, refresh_per_second=4, transient=False)
        self.first_iter: tuple[float, int] | None = None

    def _table(self, s: dict) -> Table:
        table = Table(title=f"profiling {self.title}", show_header=False, expand=False)
        table.add_column("what")
        table.add_column("value")
        heap_max = s.get("heap_max")
        table.add_row("heap used / max", f"{human_bytes(s.get('heap_used'))} / {human_bytes(heap_max)}")
        table.add_row("RSS", human_bytes(s.get("rss")))
        if s.get("javacpp_physical") is not None:
            table.add_row("JavaCPP total / max", f"{human_bytes(s.get('javacpp_total'))} / {human_bytes(s.get('javacpp_max'))}")
            table.add_row("JavaCPP physical / max", f"{human_bytes(s.get('javacpp_physical'))} / {human_bytes(s.get('javacpp_max_physical'))}")
        if s.get("direct_used"):
            table.add_row("NIO direct", human_bytes(s.get("direct_used")))
        gc = s.get("gc", {})
        table.add_row("GC count / time", f"{sum(v[0] for v in gc.values())} / {sum(v[1] for v in gc.values())} ms")
        table.add_row("threads", str(s.get("threads", "-")))
        n = s.get("iterations", 0)
        speed = ""
        if n and self.first_iter is None:
            self.first_iter = (time.monotonic(), n)
        elif n and self.first_iter and n > self.first_iter[1]:
            speed = f"  ({(n - self.first_iter[1]) / (time.monotonic() - self.first_iter[0]):.2f} it/s)"
        score = s.get("score")
        table.add_row("iterations", f"{n}{speed}" + (f"  score {score:.4g}" if score is not None else ""))
        if s.get("ws"):
            table.add_row("workspaces", ", ".join(f"{w['id']} {human_bytes(w['size'])}" for w in s["ws"][:4]))
        return table

    def update(self, sample: dict) -> None:
        self.live.update(self._table(sample))

    def __enter__(self) -> Callable[[dict], None]:
        self.live.__enter__()
        return self.update

    def __exit__(self, *exc) -> None:
        self.live.__exit__(*exc)
