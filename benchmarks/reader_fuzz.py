"""hypothesis on every document reader (tests/readers.py): --examples bad documents each (random
bytes, random JSON, the reader's good documents changed, cut, made non-UTF-8, nested deep), and
how many ended in anything but the reader's clean refusal. Result: benchmarks/results/reader_fuzz.json.

    .venv/bin/python benchmarks/reader_fuzz.py [--examples 10000] [--readers plan,tune]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import traceback
from pathlib import Path

from harness import RESULTS, Recorder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.readers import bad_documents, readers


def run(name: str, reader, examples: int) -> dict:
    seeds = reader.seeds()
    tally = {"examples": 0, "accepted": 0, "refused": 0, "uncaught": 0, "uncaught_examples": []}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one(data):
        doc = data.draw(bad_documents(reader, seeds))
        tally["examples"] += 1
        with tempfile.TemporaryDirectory() as d:
            try:
                reader.read(Path(d), doc)
                tally["accepted"] += 1
            except reader.clean:
                tally["refused"] += 1
            except Exception as err:  # noqa: BLE001  (what is counted: anything but the clean refusal)
                tally["uncaught"] += 1
                if len(tally["uncaught_examples"]) < 5:
                    tally["uncaught_examples"].append({"input": doc[:300].decode("utf-8", "replace"),
                                                       "error": "".join(traceback.format_exception_only(err))[-500:]})

    t0 = time.monotonic()
    one()
    tally["seconds"] = round(time.monotonic() - t0, 1)
    return tally


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("--readers", default="", help="comma-separated names (default: all)")
    ap.add_argument("--out", type=Path, default=RESULTS / "reader_fuzz.json")
    args = ap.parse_args()
    rec = Recorder("reader_fuzz")
    every = readers()
    names = [n for n in args.readers.split(",") if n] or sorted(every)
    rec.doc["examples_per_reader"] = args.examples
    rec.doc["readers"] = {}
    for name in names:
        rec.doc["readers"][name] = r = run(name, every[name], args.examples)
        print(f"{name}: {r['examples']} examples, {r['refused']} refused, {r['accepted']} accepted, "
              f"{r['uncaught']} uncaught ({r['seconds']} s)", flush=True)
    rec.doc["uncaught"] = sum(r["uncaught"] for r in rec.doc["readers"].values())
    print(rec.write(args.out))


if __name__ == "__main__":
    main()
