"""Live terminal view of a profiled job (rich): memory against limits and training progress, one
column per JVM (a job started through Maven, a shell or spark-submit can have several)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from pyd4j.output import human_bytes
from pyd4j.profile.jvms import KNOWN_LAUNCHERS, main_class, short_name

MAX_LANES = 6  # columns shown; the JVMs that started last are kept


class _Lane:
    def __init__(self, start: dict) -> None:
        self.pid = start.get("pid")
        self.main = main_class(start)
        command = str(start.get("command") or "")
        self.launcher = KNOWN_LAUNCHERS.get(command.split(" ", 1)[0] if command else "")
        self.sample: dict = {}
        self.first_iter: tuple[float, int] | None = None
        self.speed: float | None = None

    @property
    def working(self) -> bool:
        s = self.sample
        return bool(s.get("iterations") or s.get("javacpp_total") is not None or s.get("ws"))

    @property
    def header(self) -> str:
        tag = f"\n({self.launcher})" if self.launcher and not self.working else ""
        return f"{short_name(self.main, 28)}{tag}\npid {self.pid}"

    def update(self, sample: dict) -> None:
        self.sample = sample
        n = sample.get("iterations", 0)
        if n and self.first_iter is None:
            self.first_iter = (time.monotonic(), n)
        elif n and self.first_iter and n > self.first_iter[1]:
            self.speed = (n - self.first_iter[1]) / max(time.monotonic() - self.first_iter[0], 1e-9)


class LiveView:
    """Context manager; `update` is profile_job's `on_sample`, `jvm` its `on_jvm`."""

    def __init__(self, title: str, console: Console | None = None) -> None:
        self.title = title
        self.console = console or Console(stderr=True)
        self.lanes: dict[object, _Lane] = {}
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)

    def _heading(self) -> str:
        """The job's main class (short): of the JVM doing the work once one does, else the command's."""
        working = [lane for lane in self.lanes.values() if lane.working]
        name = max(working, key=lambda lane: lane.sample.get("iterations", 0)).main if working else self.title
        jvms = f" ({len(self.lanes)} JVMs)" if len(self.lanes) > 1 else ""
        return f"profiling {short_name(name)}{jvms}"

    def _table(self) -> Table:
        table = Table(title=self._heading(), show_header=bool(self.lanes), expand=False)
        table.add_column("")
        lanes = list(self.lanes.values())[-MAX_LANES:]
        for lane in lanes:
            table.add_column(lane.header)
        rows = [
            ("heap used / max", lambda s: f"{human_bytes(s.get('heap_used'))} / {human_bytes(s.get('heap_max'))}"),
            ("RSS", lambda s: human_bytes(s.get("rss"))),
            ("JavaCPP total / max", lambda s: f"{human_bytes(s.get('javacpp_total'))} / {human_bytes(s.get('javacpp_max'))}"
             if s.get("javacpp_total") is not None else "-"),
            ("JavaCPP physical / max", lambda s: f"{human_bytes(s.get('javacpp_physical'))} / {human_bytes(s.get('javacpp_max_physical'))}"
             if s.get("javacpp_physical") is not None else "-"),
            ("NIO direct", lambda s: human_bytes(s.get("direct_used")) if s.get("direct_used") else "-"),
            ("GC count / time", lambda s: f"{sum(v[0] for v in s.get('gc', {}).values())} / "
                                          f"{sum(v[1] for v in s.get('gc', {}).values())} ms"),
            ("threads", lambda s: str(s.get("threads", "-"))),
            ("workspaces", lambda s: ", ".join(f"{w['id']} {human_bytes(w['size'])}" for w in s.get("ws", [])[:3]) or "-"),
        ]
        if not lanes:
            table.add_row("waiting for the job's JVMs to start")
            return table
        for label, cell in rows:
            table.add_row(label, *(cell(lane.sample) if lane.sample else "…" for lane in lanes))
        table.add_row("iterations", *(self._iterations(lane) for lane in lanes))
        if len(self.lanes) > MAX_LANES:
            table.caption = f"{len(self.lanes) - MAX_LANES} earlier JVMs not shown"
        return table

    @staticmethod
    def _iterations(lane: _Lane) -> str:
        s = lane.sample
        n = s.get("iterations", 0)
        speed = f" ({lane.speed:.2f} it/s)" if lane.speed else ""
        score = f" score {s['score']:.4g}" if s.get("score") is not None else ""
        return f"{n}{speed}{score}"

    def jvm(self, start: dict) -> None:
        self.lanes.setdefault(start.get("pid"), _Lane(start))
        self.live.update(self._table())

    def update(self, sample: dict) -> None:
        pid = sample.get("pid")
        lane = self.lanes.get(pid)
        if lane is None:
            lane = self.lanes[pid] = _Lane({"pid": pid})
        lane.update(sample)
        self.live.update(self._table())

    def __enter__(self) -> "LiveView":
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.__exit__(*exc)
