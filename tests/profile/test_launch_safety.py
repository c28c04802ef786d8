"""The profiler's own safety: the socket receiver only takes the token holders' lines, serves
every agent at once so silent local connections hold none up, and says what a full disk lost; run
directories never overwrite what is already there."""

from __future__ import annotations

import json
import socket
import time

import pytest

from pyd4j.profile import agent_stream, launch
from pyd4j.profile.command import JobCommandError
from pyd4j.profile.launch import RunDirError, _SocketReceiver, check_run_dir, profile_job
from pyd4j.profile.tune import tune_job

JOB = ["java", "-Xmx64m", "-cp", "job.jar", "com.acme.Train"]


def _hello(token: str, pid: int = 4242) -> bytes:
    return (json.dumps({"type": "hello", "token": token, "pid": pid}) + "\n").encode()


def _wait_for(predicate, what: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_receiver_listens_on_loopback_and_takes_only_the_token_holders(tmp_path, monkeypatch):
    monkeypatch.setattr(agent_stream, "HELLO_TIMEOUT_S", 0.3)
    receiver = _SocketReceiver(tmp_path, "right-token")
    assert receiver.server.getsockname()[0] == "127.0.0.1"
    receiver.start()
    try:
        with socket.create_connection(("127.0.0.1", receiver.port)) as wrong:
            wrong.sendall(_hello("wrong-token") + b'{"type": "sample", "who": "wrong"}\n')
        with socket.create_connection(("127.0.0.1", receiver.port)) as garbage:
            garbage.sendall(b"not json\n")
        silent = socket.create_connection(("127.0.0.1", receiver.port))  # never sends its hello
        with socket.create_connection(("127.0.0.1", receiver.port)) as agent:
            agent.sendall(_hello("right-token", 11) + b'{"type": "sample", "who": "agent"}\n')
            agent.sendall(b'{"type": "end"}\n')
        _wait_for(lambda: receiver.rejected == 3, "three connections without the token dropped")
        silent.close()
    finally:
        receiver.close()
    assert not receiver.is_alive()
    assert receiver.rejected == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jvm-11.jsonl"]
    assert _lines(tmp_path / "jvm-11.jsonl") == [{"type": "sample", "who": "agent"}, {"type": "end"}]
    assert receiver.server.fileno() == -1  # the listening socket is closed once the run is over


def test_silent_connections_hold_up_no_agent_and_every_agent_has_its_own_file(tmp_path, monkeypatch):
    """A local process that opens connections and says nothing, before any agent connects: with
    connections served one at a time the agents would wait out the hello timeout (set to 10 min
    here) and their samples would be lost; served concurrently, they all stream at once."""
    monkeypatch.setattr(agent_stream, "HELLO_TIMEOUT_S", 600.0)
    receiver = _SocketReceiver(tmp_path, "tok")
    receiver.start()
    silent = [socket.create_connection(("127.0.0.1", receiver.port)) for _ in range(4)]
    agents = []
    try:
        for pid in (21, 22, 23):
            agent = socket.create_connection(("127.0.0.1", receiver.port))
            agent.sendall(_hello("tok", pid) + json.dumps({"type": "start", "pid": pid}).encode() + b"\n")
            agents.append(agent)
        for i, agent in enumerate(agents):
            agent.sendall(json.dumps({"type": "sample", "n": i}).encode() + b"\n")
        for pid in (21, 22, 23):
            path = tmp_path / f"jvm-{pid}.jsonl"
            _wait_for(lambda path=path: len(_lines(path)) == 2, f"{path.name} received while silent connections are open")
        assert all(s.fileno() != -1 for s in silent)      # the silent ones are still open: nothing waited them out
        assert [_lines(tmp_path / f"jvm-{pid}.jsonl")[1]["n"] for pid in (21, 22, 23)] == [0, 1, 2]
    finally:
        for c in agents + silent:
            c.close()
        receiver.close()
    assert not receiver.is_alive()


def test_receiver_fake_disk_full_counts_what_was_lost_and_keeps_the_rest(tmp_path, monkeypatch):
    """Isolates our write path: the lane file raises ENOSPC (as a full disk does) after 100 bytes."""
    import errno

    class FullDisk:
        def __init__(self, path):
            self.real = open(path, "ab")  # noqa: SIM115
            self.written = 0

        def write(self, data):
            if self.written + len(data) > 100:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return self.real.write(data)

        def flush(self):
            self.real.flush()

        def close(self):
            self.real.close()

    monkeypatch.setattr(agent_stream, "_open_lane", FullDisk)
    receiver = _SocketReceiver(tmp_path, "tok")
    receiver.start()
    kept = b'{"type":"start","t":1,"pid":9}\n{"type":"sample","t":2}\n'
    lost = b"".join(b'{"type":"sample","t":%d,"rss":123456789}\n' % t for t in range(3, 13))
    try:
        with socket.create_connection(("127.0.0.1", receiver.port)) as agent:
            agent.sendall(_hello("tok", 9) + kept)
            _wait_for(lambda: len(_lines(tmp_path / "jvm-9.jsonl")) == 2, "the first lines written")
            agent.sendall(lost)
            agent.sendall(b'{"type":"end","t":99}\n')
        _wait_for(lambda: receiver.write_errors and receiver.write_errors[0]["lost_lines"] == 11, "the lost lines counted")
    finally:
        receiver.close()
    assert (tmp_path / "jvm-9.jsonl").read_bytes() == kept       # what was written before stays
    (error,) = receiver.write_errors
    assert error["error"] == "No space left on device" and error["errno"] == "ENOSPC"
    assert error["lost_bytes"] == len(lost) + len(b'{"type":"end","t":99}\n')
    assert error["from_t_ms"] == 3 and error["pid"] == 9


def test_run_dir_with_files_is_refused_and_left_untouched(tmp_path):
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "stdout.log").write_text("my notes")
    (run_dir / "timeline.jsonl").write_text('{"type": "sample"}\n')
    with pytest.raises(RunDirError, match="not empty") as err:
        profile_job(JOB, run_dir)
    assert isinstance(err.value, JobCommandError)  # the CLI shows it as a usage error
    assert (run_dir / "stdout.log").read_text() == "my notes"
    assert (run_dir / "timeline.jsonl").read_text() == '{"type": "sample"}\n'
    assert sorted(p.name for p in run_dir.iterdir()) == ["stdout.log", "timeline.jsonl"]


def test_a_file_given_as_run_dir_is_refused(tmp_path):
    target = tmp_path / "report.txt"
    target.write_text("keep")
    with pytest.raises(RunDirError):
        check_run_dir(target)
    assert target.read_text() == "keep"


def test_new_or_empty_run_dirs_are_fine(tmp_path):
    check_run_dir(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_run_dir(tmp_path / "empty")


def test_tune_refuses_an_earlier_tune_out_before_running_anything(tmp_path, monkeypatch):
    out = tmp_path / "tune"
    (out / "after").mkdir(parents=True)
    (out / "after" / "run.json").write_text("{}")
    ran = []
    monkeypatch.setattr("pyd4j.profile.tune.profile_job", lambda *a, **k: ran.append(a))
    with pytest.raises(RunDirError):
        tune_job(JOB, out)
    assert ran == []
    assert (out / "after" / "run.json").read_text() == "{}"
