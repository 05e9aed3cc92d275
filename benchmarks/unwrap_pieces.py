"""Time of the xatlas unwrap against the number of pieces it is given (``meshlift.mesh._xatlas_job``).

Usage: ``python benchmarks/unwrap_pieces.py [PIECES ...]`` (default 1 2 5 10 20). Two 50k-face meshes: the spot
mesh of ``../shared/data/spot`` subdivided and decimated to 50k faces (one smooth connected surface), and 2,700
small boxes and studs plus a bumpy sphere, decimated to 50k (like a lego pass-1 mesh: many parts and charts).
Prints seconds, chart count, atlas size and utilisation per piece count. Run it alone (timings).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _decimate(v, f, faces):
    import fast_simplification

    if len(f) <= faces:
        return v, f
    return fast_simplification.simplify(v, f, 1 - faces / len(f))


def meshes():
    import trimesh

    data = Path(os.environ.get("MESHLIFT_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    spot = data / "spot" / "spot.obj"
    if spot.is_file():
        m = trimesh.load(spot, force="mesh")
        while len(m.faces) < 100_000:
            m = m.subdivide()
        yield "spot, 50k faces", _decimate(m.vertices.astype(np.float32), m.faces.astype(np.int64), 50_000)
    rng = np.random.default_rng(0)
    parts = []
    for _ in range(300):
        b = trimesh.creation.box((0.08, 0.04, 0.03))
        b.apply_translation(rng.uniform(-1, 1, 3))
        parts.append(b)
        for s in range(8):
            c = trimesh.creation.cylinder(0.008, 0.01, sections=12)
            c.apply_translation(b.centroid + [(s % 4 - 1.5) * 0.02, (s // 4 - 0.5) * 0.02, 0.02])
            parts.append(c)
    s = trimesh.creation.icosphere(subdivisions=6)
    s.vertices *= 1 + 0.05 * rng.standard_normal((len(s.vertices), 1))
    parts.append(s)
    m = trimesh.util.concatenate(parts)
    yield "2,700 parts, 50k faces", _decimate(m.vertices.astype(np.float32), m.faces.astype(np.int64), 50_000)


def main(argv=None) -> int:
    import trimesh

    from meshlift.mesh import _xatlas_job

    counts = [int(x) for x in (argv if argv is not None else sys.argv[1:])] or [1, 2, 5, 10, 20]
    for name, (v, f) in meshes():
        area = trimesh.Trimesh(v, f, process=False).area
        tpu = 2048 * np.sqrt(0.6 / area)  # as unwrap(resolution=2048)
        for pieces in counts:
            t = time.perf_counter()
            r = _xatlas_job.generate(v.astype(np.float32), f, tpu, 4, pieces)
            dt = time.perf_counter() - t
            assert np.array_equal(r["vmapping"][r["indices"]], f)
            print(f"{name}: pieces {pieces:3d}  {dt:7.1f} s  charts {r['charts']:6d}  atlas {r['width']}x{r['height']}"
                  f"  utilization {r['utilization']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
