"""Test helper: run the Khronos glTF-Validator (npm ``gltf-validator``) through node on a file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("gltf_validate.js")


def validator_dir() -> str | None:
    d = os.environ.get("MESHLIFT_GLTF_VALIDATOR_DIR")
    if d and (Path(d) / "gltf-validator").is_dir():
        return d
    local = Path("/tmp/gv/node_modules")  # developer install: npm install --prefix /tmp/gv gltf-validator
    return str(local) if (local / "gltf-validator").is_dir() else None


def validate(path: Path) -> dict:
    """Validation report summary; skips the calling test when node or the package is missing."""
    node = shutil.which("node")
    d = validator_dir()
    if node is None or d is None:
        pytest.skip("glTF-Validator not available (needs node and MESHLIFT_GLTF_VALIDATOR_DIR)")
    env = dict(os.environ, MESHLIFT_GLTF_VALIDATOR_DIR=d)
    proc = subprocess.run([node, str(SCRIPT), str(path)], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"validator failed: {proc.stderr}")
    return json.loads(proc.stdout)
