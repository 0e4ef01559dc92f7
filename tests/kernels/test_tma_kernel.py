"""The GPU tests' TMA copy kernel (tests/tma.py) compiles, without a device, for an H100
or H200 (compute capability 9.0) with the installed Triton: the first GPU run found it
failing to compile there, a failure no CPU test could see. Skipped where Triton is not
installed (the test extra does not bring it)."""

from __future__ import annotations

import pytest

from tests.tma import tma_copy_source


def test_the_tma_copy_kernel_compiles_for_compute_capability_9() -> None:
    copy = tma_copy_source()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    source = ASTSource(
        copy,
        signature={
            "src": "*fp32",
            "dst": "*fp32",
            "m": "i32",
            "n": "i32",
            "block_m": "constexpr",
            "block_n": "constexpr",
        },
        constexprs={"block_m": 64, "block_n": 64},
    )
    try:
        kernel = compile(source, target=GPUTarget("cuda", 90, 32))
    except RuntimeError as error:  # a Triton build without the CUDA backend's tools
        if "ptxas" in str(error):
            pytest.skip(f"this Triton cannot assemble for CUDA here: {error}")
        raise
    ttir = kernel.asm["ttir"]
    assert ttir.count("tt.make_tensor_descriptor") == 2  # made on the device: global scratch
    assert "tt.descriptor_load" in ttir and "tt.descriptor_store" in ttir
