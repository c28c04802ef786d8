"""The profiler's own safety: the socket receiver only takes the token holder's lines and cannot be
held up by a silent local connection; run directories never overwrite what is already there."""

from __future__ import annotations

import json
import socket
import time

import pytest

from pyd4j.profile import launch
from pyd4j.profile.command import JobCommandError
from pyd4j.profile.launch import RunDirError, _SocketReceiver, check_run_dir, profile_job
from pyd4j.profile.tune import tune_job

JOB = ["java", "-Xmx64m", "-cp", "job.jar", "com.acme.Train"]


def _hello(token: str) -> bytes:
    return (json.dumps({"type": "hello", "token": token}) + "\n").encode()


def test_receiver_listens_on_loopback_and_takes_only_the_token_holder(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "HELLO_TIMEOUT_S", 0.3)
    path = tmp_path / "timeline.jsonl"
    receiver = _SocketReceiver(path, "right-token")
    assert receiver.server.getsockname()[0] == "127.0.0.1"
    receiver.start()
    try:
        with socket.create_connection(("127.0.0.1", receiver.port)) as wrong:
            wrong.sendall(_hello("wrong-token") + b'{"type": "sample", "who": "wrong"}\n')
            time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", receiver.port)) as garbage:
            garbage.sendall(b"not json\n")
            time.sleep(0.2)
        silent = socket.create_connection(("127.0.0.1", receiver.port))  # never sends its hello
        with socket.create_connection(("127.0.0.1", receiver.port)) as agent:
            agent.sendall(_hello("right-token") + b'{"type": "sample", "who": "agent"}\n')
            agent.sendall(b'{"type": "end"}\n')
        receiver.join(timeout=120)  # a deadline for a hang, not a speed limit
        silent.close()
    finally:
        receiver.stop.set()
        receiver.join(timeout=120)
    assert not receiver.is_alive()
    assert receiver.rejected == 3
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines == [{"type": "sample", "who": "agent"}, {"type": "end"}]
    assert receiver.server.fileno() == -1  # the listening socket is closed once the agent is done


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
