"""Documents the reader fuzz (benchmarks/reader_fuzz.py, 10,000 examples a reader) found uncaught, each
read again here: a moved tune directory whose document has `"after": null` or an `out_dir` with a NUL
byte, and a device profiles file with `"conv_algorithms": null` (the schema's "not given")."""

from __future__ import annotations

import json
from pathlib import Path

from tests.readers import DEVICES, TUNE, read_devices, read_tune


def test_a_moved_tune_document_with_a_null_side_is_read(tmp_path: Path) -> None:
    found = read_tune(tmp_path, json.dumps({**TUNE, "after": None}).encode())
    assert found is not None and found[1] == "before"
    assert found[0]["before"]["run_dir"] == str(tmp_path / "before")   # the moved directory's own run


def test_a_tune_document_recording_a_path_with_a_nul_byte_is_read(tmp_path: Path) -> None:
    found = read_tune(tmp_path, json.dumps({**TUNE, "out_dir": "T\u0000i"}).encode())
    assert found is not None and found[0]["before"]["run_dir"] == str(tmp_path / "before")


def test_null_settings_in_a_device_profiles_file_are_not_given(tmp_path: Path) -> None:
    from pyd4j.commands._devices import device_profiles
    from pyd4j.sched.costmodel import CostModel

    for key in ("conv_algorithms", "compute_efficiency", "transfer_latency_s", "host_memory_bytes"):
        data = json.dumps({k: v for k, v in DEVICES.items() if k != key}).encode()
        read_devices(tmp_path, json.dumps({**DEVICES, key: None}).encode())   # no exception
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({**DEVICES, key: None}))
        absent = tmp_path / f"{key}.absent.json"
        absent.write_bytes(data)
        nulled = CostModel.for_device("mine", device_profiles(str(path)))
        left_out = CostModel.for_device("mine", device_profiles(str(absent)))
        assert nulled.algos == left_out.algos and nulled.efficiency == left_out.efficiency
