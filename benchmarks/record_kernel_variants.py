"""Record the Triton kernel variants a meshlift command launches (on a GPU) and merge them into the list the
start-up warm-up compiles (``src/meshlift/kernels/variants.json``; design: ``meshlift.kernels.precompile``).

Usage (on a CUDA machine, once per shipped job when a kernel's signature or launch changes)::

    python benchmarks/record_kernel_variants.py --job nvdiffrec --out rec.jsonl -- demo --device cuda
    python benchmarks/record_kernel_variants.py --job nvdiffrec --out rec.jsonl -- \\
        reconstruct spot.obj --preset spot --set device=cuda --set iter_pass1=500 --set iter_pass2=500
    python benchmarks/record_kernel_variants.py --merge rec.jsonl

The first form runs ``meshlift ARGS...`` in this process with every ``triton.compile`` recorded (kernel,
signature, constexprs, specialisation attributes, non-default options, seconds) as JSON lines appended to
``--out``; the warm-up is switched off meanwhile. ``--merge`` adds the recorded variants to variants.json
(existing order kept, new ones appended, jobs united) and prints the compile seconds per kernel.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import sys
from pathlib import Path

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", default="nvdiffrec")
    ap.add_argument("--out", default="kernel_variants.jsonl")
    ap.add_argument("--merge", default="", help="a recorded JSONL file to merge into variants.json")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    from meshlift.cli.process import ENV_FAST_EXIT
    from meshlift.kernels import precompile

    if args.merge:
        rows = [json.loads(line) for line in Path(args.merge).read_text().splitlines() if line.strip()]
        n = precompile.merge_records(rows)
        by = collections.defaultdict(lambda: [0, 0.0])
        for r in rows:
            by[r["kernel"]][0] += 1
            by[r["kernel"]][1] += r.get("s", 0.0)
        for k, (c, s) in sorted(by.items(), key=lambda kv: -kv[1][1]):
            print(f"  {k}: {c} compiles, {s:.2f} s")
        print(f"{len(rows)} recorded compiles, {sum(r.get('s', 0.0) for r in rows):.1f} s; "
              f"{n} variants in {precompile.VARIANTS_PATH}")
        return 0
    if not cmd:
        ap.error("give the meshlift command after --, or --merge FILE")
    os.environ[precompile.ENV_WORKERS] = "0"
    # run as __main__, the CLI would end this process in main() (cli/process.py): keep the normal exit
    os.environ[ENV_FAST_EXIT] = "0"
    sys.argv = ["meshlift"] + cmd
    with precompile.record(args.out, args.job):
        try:
            runpy.run_module("meshlift.cli.main", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            if e.code not in (0, None):
                raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
