"""The agent route (org.pyd4j.train.AgentRoute, what the agent's plan= option calls at a job's fit())
keeps no network alive: a job that drops a network gets its parameters, gradients and updater state
back, as without the agent (real DL4J in the session JVM)."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

import pytest

from tests.train.test_refusals import network, plan_file

pytestmark = pytest.mark.jvm


def test_a_routed_network_is_collected_once_the_job_drops_it(jvm, tmp_path: Path) -> None:
    import jpype

    route = jpype.JClass("org.pyd4j.train.AgentRoute")
    path = plan_file(tmp_path, "lenet")
    net = network("lenet")
    said = json.loads(str(route.attach(net, path)))
    assert said["status"] == "attached" and said["nodes"] == 7
    assert json.loads(str(route.attach(net, path))) == {"status": "attached", "again": True}   # once per network
    assert json.loads(str(route.stats(net)))["iterations"] == 0   # its trainer, found through the network
    weak = jpype.JClass("java.lang.ref.WeakReference")(net)
    del net
    system = jpype.JClass("java.lang.System")
    for _ in range(50):
        gc.collect()   # the Python proxy's reference goes
        system.gc()
        if weak.get() is None:
            break
        time.sleep(0.1)
    assert weak.get() is None
