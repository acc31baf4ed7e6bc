"""Convert TREC DL 2019 judged pairs to cairn's training JSONL (what `cairn train-reranker --data` reads).

    .venv/bin/python scripts/trec_to_silver.py /tmp/trec_silver.jsonl
    .venv/bin/cairn train-reranker --data /tmp/trec_silver.jsonl --dry-run

The data stays outside the repository (licence): write the output anywhere but here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "trec_dl" / "judged_pairs_dl19.jsonl"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: trec_to_silver.py OUT.jsonl\n")
        return 2
    if not SOURCE.is_file():
        sys.stderr.write(f"error: {SOURCE} not found (../shared/data is read in place)\n")
        return 1
    out = Path(argv[0])
    n = 0
    with SOURCE.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for line in src:
            r = json.loads(line)
            dst.write(
                json.dumps(
                    {
                        "query": r["query"],
                        "memory": r["passage"],
                        "grade": int(r["grade"]),
                        "hard_negative": False,
                        "query_key": str(r["qid"]),
                        "delivery_id": None,
                    }
                )
                + "\n"
            )
            n += 1
    sys.stderr.write(f"wrote {n} pairs to {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
