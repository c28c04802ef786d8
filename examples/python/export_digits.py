"""Export scikit-learn's bundled handwritten digits (no download) to examples/data/digits.csv.

Run once; the CSV is committed and read by the Java examples (org.pyd4j.examples.DigitsData)
and the Python examples (digits.py). Each line: split (0 = train, 1 = test), label (0-9), then
the 64 pixel values (0-16) of the 8x8 image, row by row. The split is stratified and fixed
(seed 0, 20% test).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

OUT = Path(__file__).resolve().parents[1] / "data" / "digits.csv"


def main() -> None:
    digits = load_digits()
    x, y = digits.data.astype(np.int64), digits.target.astype(np.int64)
    idx_train, idx_test = train_test_split(np.arange(len(y)), test_size=0.2, random_state=0, stratify=y)
    split = np.zeros(len(y), dtype=np.int64)
    split[idx_test] = 1
    rows = np.column_stack([split, y, x])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(OUT, rows, fmt="%d", delimiter=",")
    print(f"wrote {OUT.name}: {len(idx_train)} train, {len(idx_test)} test")


if __name__ == "__main__":
    main()
