"""`estimate`, `flags`, `batch` and `plan` JSON on the example networks: this tree against another commit.

    .venv/bin/python benchmarks/cli_golden.py --base COMMIT [--networks mlp,lenet,...]
        [--out benchmarks/results/cli_golden.json]

The check that a change meant to keep behaviour kept it: each command's JSON document for every
example network (batch 16; flags with --total 8g, batch with --total 2g, plan at batch 8) from the
commit `--base` (a temporary git worktree, sharing this tree's Java build) and from this tree, in the
same Python. Per command and network: identical or not, and every JSON path whose value differs
(old and new values), so that each difference can be traced to the change that made it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from harness import RESULTS, ROOT, Recorder

NETWORKS = ("mlp", "lenet", "deep_cnn_bn", "lstm", "resnet_graph", "policy_value", "two_input", "deep_cnn30")
COMMANDS = {"estimate": ["--batch", "16"], "flags": ["--batch", "16", "--total", "8g"], "batch": ["--total", "2g"],
            "plan": ["--batch", "8"]}


def run(tree: Path, command: str, network: str) -> Any:
    model = ROOT / "examples" / "networks" / f"{network}.json"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "pyd4j.cli", command, "--model", str(model),
                          *COMMANDS[command], "--json"], capture_output=True, text=True, env=env, cwd=tree, timeout=1800)
    try:
        return json.loads(out.stdout)
    except ValueError:
        return {"exit": out.returncode, "stderr": out.stderr[-500:]}


def differences(a: Any, b: Any, path: str = "") -> list[dict]:
    """Every JSON path whose value differs between a and b."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [{"path": path, "base": a, "now": b}]


def summary(results: dict[str, dict]) -> dict:
    """Documents identical; the differences that change a figure both trees print (not text, such as a
    module named in a reason), and the fields only one of them has (added or removed)."""
    every = [d for r in results.values() for d in r["differences"]]
    added = [d for d in every if d["base"] == "<absent>"]
    removed = [d for d in every if d["now"] == "<absent>"]
    figures = [d for d in every if d not in added and d not in removed
               and not (isinstance(d["base"], str) and isinstance(d["now"], str))]
    return {"documents": len(results), "identical": sum(r["identical"] for r in results.values()),
            "differences": len(every), "figure_differences": len(figures),
            "fields_added": sorted({d["path"] for d in added}), "fields_removed": sorted({d["path"] for d in removed})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the commit to compare with")
    ap.add_argument("--networks", default=",".join(NETWORKS))
    ap.add_argument("--out", default=str(RESULTS / "cli_golden.json"))
    args = ap.parse_args()
    rec = Recorder("cli_golden")
    base = subprocess.run(["git", "rev-parse", args.base], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    rec.doc.update(base=base, commands=COMMANDS, results={})
    with tempfile.TemporaryDirectory(prefix="pyd4j-golden-") as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), base], cwd=ROOT, check=True, capture_output=True)
        try:
            (tree / "java" / "target").symlink_to(ROOT / "java" / "target")
            for network in args.networks.split(","):
                for command in COMMANDS:
                    d = differences(run(tree, command, network), run(ROOT, command, network))
                    rec.doc["results"][f"{command} {network}"] = {"identical": not d, "differences": d}
                    print(command, network, "identical" if not d else f"{len(d)} differences", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    rec.doc["summary"] = summary(rec.doc["results"])
    print(rec.doc["summary"])
    rec.write(args.out)


if __name__ == "__main__":
    main()
