"""hypothesis on every document reader (tests/readers.py): whatever bytes a plan, timeline, run.json,
tune.json, device profiles, sidecar, network configuration or inference request holds, the reader
returns or raises its own clean refusal, never anything else. A few hundred examples each here;
benchmarks/reader_fuzz.py runs 10,000 each."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.readers import bad_documents, readers

READERS = readers()
SEEDS: dict[str, list] = {}


def _seeds(name: str) -> list:
    if name not in SEEDS:
        SEEDS[name] = READERS[name].seeds()
    return SEEDS[name]


@pytest.mark.parametrize("name", sorted(READERS))
def test_every_reader_takes_its_own_good_document(name):
    reader = READERS[name]
    with tempfile.TemporaryDirectory() as d:
        for seed in _seeds(name):
            reader.read(Path(d), reader.as_bytes(seed))


@pytest.mark.parametrize("name", sorted(READERS))
def test_every_reader_refuses_bad_documents_cleanly(name):
    reader = READERS[name]

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def check(data):
        doc = data.draw(bad_documents(reader, _seeds(name)))
        with tempfile.TemporaryDirectory() as d:
            try:
                reader.read(Path(d), doc)
            except reader.clean as err:
                assert str(err).strip(), "a refusal without a message"

    check()
