"""Tests whose results depend on the CPU's kernels, run twice.

`name` runs at the CPU's own SIMD level; `name_avx2` runs the same binary
(or, with `twin_filter`, those of its cases) with PLATEAU_SIMD=avx2, which
holds Plateau's kernels, OpenBLAS's core and oneDNN's ISA at AVX2
(kernels/cpu/simd.h). A level is only ever lowered: on an AVX-512 machine
the twin takes the paths of an AVX2-only CPU (oneDNN without bf16 kernels,
the fixed-order bf16 products, OpenBLAS's Haswell kernels); on an AVX2
machine it is the same run; below AVX2 it runs at the CPU's level. Both are
Bazel targets, so an unchanged twin comes from the cache.
"""

def cc_test_with_avx2_twin(name, twin_filter = None, **kwargs):
    native.cc_test(name = name, **kwargs)
    twin = dict(kwargs)
    twin["env"] = dict(kwargs.get("env", {}), PLATEAU_SIMD = "avx2")
    if twin_filter:
        twin["args"] = kwargs.get("args", []) + ["--gtest_filter=" + twin_filter]
    native.cc_test(name = name + "_avx2", **twin)

def sh_test_with_avx2_twin(name, **kwargs):
    native.sh_test(name = name, **kwargs)
    twin = dict(kwargs)
    twin["env"] = dict(kwargs.get("env", {}), PLATEAU_SIMD = "avx2")
    native.sh_test(name = name + "_avx2", **twin)
