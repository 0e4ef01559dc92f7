"""One arena per rank under torch.distributed (gloo, 2 processes), one per JAX device."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("ranks.py")
ROOT = WORKER.parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def test_one_arena_per_rank_under_torch_distributed() -> None:
    pytest.importorskip("torch.distributed")
    port = _free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "torch", str(rank), "2", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for rank in range(2)
    ]
    outputs = []
    try:
        for proc in ranks:
            out, err = proc.communicate(timeout=180)
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
    for rank, (code, out, err) in enumerate(outputs):
        assert code == 0, f"rank {rank} failed:\n{err[-3000:]}"
        assert out.split()[-2:] == ["OK", str(rank)]


def test_one_arena_per_jax_device() -> None:
    pytest.importorskip("jax")
    result = subprocess.run(
        [sys.executable, str(WORKER), "jax"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "OK"
