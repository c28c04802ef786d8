"""`pyd4j profile` saves the networks a job trained (DL4J's own JSON and an input sidecar read from the first
batch), so that estimate/flags size a job's network without its code. Checked on real jobs (DL4J's fit() in
TrainSynthetic) against the configurations and input types they were started with: the saved network must
give the same estimate as the original."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyd4j.jvm import JvmOptions, examples_jar, java_command
from pyd4j.dl4j.input_types import InputTypeError, inputs_from_shapes, read_sidecar
from pyd4j.memory.estimate import estimate

pytestmark = [pytest.mark.jvm]

NETWORKS = Path(__file__).resolve().parents[2] / "examples" / "networks"
CLI = "import sys; from pyd4j.cli import main; main(sys.argv[1:], prog_name='pyd4j')"


def profile(tmp_path: Path, name: str, batch: int) -> dict:
    job = java_command(JvmOptions.of(heap_max=256 * 1024**2), "org.pyd4j.examples.TrainSynthetic",
                       [str(NETWORKS / f"{name}.json"), str(batch), "2"], extra_classpath=[examples_jar()])
    out = tmp_path / name
    p = subprocess.run([sys.executable, "-c", CLI, "profile", "--json", "--no-report", "--out", str(out), "--", *job],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.parametrize("name, batch", [("lenet", 8), ("lstm", 4), ("two_input", 8)])
def test_a_profiled_jobs_network_estimates_as_its_own_configuration(tmp_path, name, batch):
    doc = profile(tmp_path, name, batch)
    # TrainSynthetic warms up at batch 1 on the same configuration, then trains at `batch`: one network saved
    # per distinct configuration, with the largest batch it trained on
    assert len(doc["networks"]) == 1, doc["networks"]
    net = doc["networks"][0]
    saved = Path(net["path"])
    assert saved.name == "network-1.json" and net["batch"] == batch
    # the input types read from the batch's shape are the ones the network was written for (TrainSynthetic
    # feeds lenet's flattened-image input as an image, which its FeedForwardToCnn preprocessor passes on)
    def unflat(specs):
        return [{**d, "type": d["type"].replace("Flat", "")} for d in specs]
    assert unflat(read_sidecar(Path(net["sidecar"]))) == unflat(read_sidecar(NETWORKS / f"{name}.input.json"))
    assert net["flags"] == f"pyd4j flags --model {saved} --batch {batch}"
    # and the saved network is the same network to the memory model
    mine, theirs = estimate(saved, batch), estimate(NETWORKS / f"{name}.json", batch)
    assert mine.breakdown() == theirs.breakdown() and mine.parameter_count == theirs.parameter_count


def test_input_types_from_shapes_hand_worked():
    # the layouts DL4J uses by default, and the ones a configuration names
    assert inputs_from_shapes({"vertices": {}}, [[32, 11, 19, 19]]) == \
        [{"type": "convolutional", "height": 19, "width": 19, "channels": 11}]
    assert inputs_from_shapes({"vertices": {}, "x": {"cnn2dDataFormat": "NHWC"}}, [[32, 19, 17, 11]]) == \
        [{"type": "convolutional", "height": 19, "width": 17, "channels": 11}]
    assert inputs_from_shapes({"confs": []}, [[4, 7, 50]]) == [{"type": "recurrent", "size": 7, "timeSeriesLength": 50}]
    assert inputs_from_shapes({"confs": [], "f": {"rnnDataFormat": "NWC"}}, [[4, 50, 7]]) == \
        [{"type": "recurrent", "size": 7, "timeSeriesLength": 50}]
    assert inputs_from_shapes({"vertices": {}}, [[8, 10], [8, 3]]) == \
        [{"type": "feedForward", "size": 10}, {"type": "feedForward", "size": 3}]
    with pytest.raises(InputTypeError, match="5 dimensions.*--input"):
        inputs_from_shapes({"vertices": {}}, [[1, 2, 3, 4, 5]])


def test_a_network_file_that_cannot_be_written_is_an_error_and_exit_1(tmp_path):
    from pyd4j.commands.profile import _summarise, incomplete

    run_dir = Path(profile(tmp_path, "mlp", 4)["run_dir"])
    assert (run_dir / "network-1.json").is_file()
    for f in run_dir.glob("network-1*"):
        f.unlink()
    (run_dir / "network-1.json").mkdir()   # a path the summary cannot write, as a full or read-only disk refuses
    doc = _summarise(run_dir, report=False, as_json=True, stopped_by=None)
    assert "could not write the job's networks" in doc["networks_error"] and "networks" not in doc
    assert incomplete(doc)   # `pyd4j profile` exits 1 on it
