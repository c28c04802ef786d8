"""The agents' streams over a loopback socket (`pyd4j profile --socket`): pyd4j listens, and the first line
of each connection must carry a random token handed to the job in its environment (PYD4J_AGENT_TOKEN),
so no other local process can inject samples; connections are served concurrently, so a silent one holds
up no agent; a stream that cannot be written (disk full) is counted, not lost without a word.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import socket
import threading
import time
from pathlib import Path

from pyd4j.profile.jvms import LANE_PREFIX, LANE_SUFFIX

# How long a connection to the socket receiver may take to send its hello line before it is dropped.
HELLO_TIMEOUT_S = 5.0


class SocketReceiver(threading.Thread):
    """Accepts agent connections on loopback, each served on its own thread: a connection whose
    first line carries the token has its lines appended to `jvm-<pid>.jsonl`; any other (wrong
    token, garbage, silent past HELLO_TIMEOUT_S) is dropped without holding up the others."""

    def __init__(self, run_dir: Path, token: str) -> None:
        super().__init__(name="pyd4j-agent-receiver", daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.run_dir = run_dir
        self.token = token
        self.rejected = 0
        self.streams: list[Path] = []
        self.write_errors: list[dict] = []
        self.stop = threading.Event()
        self._handlers: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    conn, _ = self.server.accept()
                except OSError:
                    continue
                with self._lock:
                    self._open.add(conn)
                handler = threading.Thread(target=self._serve, args=(conn,), name="pyd4j-agent-stream", daemon=True)
                self._handlers.append(handler)
                handler.start()
        finally:
            self.server.close()

    def close(self, timeout_s: float = HELLO_TIMEOUT_S + 2) -> None:
        """Stop accepting; let open streams finish (their JVMs are gone by now), then cut them."""
        self.stop.set()
        self.join(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        for h in list(self._handlers):
            h.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            for conn in self._open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for h in list(self._handlers):
            h.join(timeout=2)

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                hello = self._hello(conn)
                if hello is None:
                    with self._lock:
                        self.rejected += 1  # a local process without the token: drop it
                    return
                pid, rest = hello
                path = self.run_dir / f"{LANE_PREFIX}{pid}{LANE_SUFFIX}"
                with self._lock:
                    n = 2
                    while path in self.streams or path.exists():
                        path = self.run_dir / f"{LANE_PREFIX}{pid}-{n}{LANE_SUFFIX}"
                        n += 1
                    self.streams.append(path)
                conn.settimeout(None)
                _copy_stream(conn, rest, path, pid, self.write_errors, self._lock)
        finally:
            with self._lock:
                self._open.discard(conn)

    def _hello(self, conn: socket.socket) -> tuple[int | str, bytes] | None:
        """Read the first line within HELLO_TIMEOUT_S; (the agent's pid, the bytes after the line)
        if it carries the token."""
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        data = b""
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0 or len(data) > 4096:
                return None
            conn.settimeout(min(left, 0.5))
            try:
                chunk = conn.recv(4096)
            except socket.timeout:
                if self.stop.is_set():
                    return None  # the run is over: no agent is still to say hello
                continue
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        first, rest = data.split(b"\n", 1)
        try:
            hello = json.loads(first)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(hello, dict) or hello.get("type") != "hello" \
                or not secrets.compare_digest(str(hello.get("token", "")).encode(), self.token.encode()):
            return None
        pid = hello.get("pid")
        return (int(pid) if isinstance(pid, int) else "unknown"), rest


def _copy_stream(conn: socket.socket, rest: bytes, path: Path, pid, errors: list[dict], lock: threading.Lock) -> None:
    """Append an agent's stream to its file. When a write fails (disk full), the lines from then on
    are counted, not written, and the stream is still read to its end, so the job is never held up."""
    failure: dict | None = None
    out = None
    for chunk in _chunks(conn, rest):
        if failure is None:
            try:
                out = out or _open_lane(path)
                out.write(chunk)
                out.flush()
                continue
            except OSError as err:
                failure = {"pid": pid, "file": path.name, "error": os_error(err),
                           "errno": errno.errorcode.get(err.errno or 0, ""), "lost_lines": 0, "lost_bytes": 0,
                           "from_t_ms": _first_t(chunk)}
                with lock:
                    errors.append(failure)
        failure["lost_lines"] += chunk.count(b"\n")
        failure["lost_bytes"] += len(chunk)
    if out is not None:
        try:
            out.close()
        except OSError:
            pass


def _open_lane(path: Path):
    return path.open("ab")


def os_error(err: OSError) -> str:
    return os.strerror(err.errno) if err.errno else str(err)


def _chunks(conn: socket.socket, first: bytes):
    if first:
        yield first
    while True:
        try:
            chunk = conn.recv(1 << 16)
        except OSError:
            return
        if not chunk:
            return
        yield chunk


def _first_t(chunk: bytes) -> int | None:
    match = re.search(rb'"t":(\d+)', chunk)
    return int(match.group(1)) if match else None
