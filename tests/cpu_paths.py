"""Names this machine's CPU and the kernel paths its tests cannot take.

The tests run every kernel path at or below the CPU's instructions
(kernels/cpu/BUILD and bazel/simd_twin.bzl lower the SIMD level, never
raise it), so a green run on an AVX2-only CPU says nothing of the AVX-512
and bf16 paths: tests/run.sh prints these lines beside its count.

Usage: cpu_paths.py [CPUINFO]   (default /proc/cpuinfo)
"""

import sys

# (flags the path needs, the path)
PATHS = [
    (["avx2", "fma"], "the AVX2 kernels and the fixed-order bf16 products"),
    (["avx512f"], "the AVX-512 kernels and OpenBLAS's SkylakeX kernels"),
    (["avx512_bf16"], "oneDNN's AVX-512 BF16 products"),
    (["amx_bf16"], "oneDNN's AMX products"),
]
SHOWN = ["avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16",
         "amx_tile"]


def describe(cpuinfo):
    model, flags = "unknown", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        if key.strip() == "flags" and not flags:
            flags = set(value.split())
    has = [flag for flag in SHOWN if flag in flags]
    lacks = [flag for flag in SHOWN if flag not in flags]
    missed = [path for needed, path in PATHS
              if not all(flag in flags for flag in needed)]
    parts = ([f"has {' '.join(has)}"] if has else []) + (
        [f"lacks {' '.join(lacks)}"] if lacks else [])
    return [f"cpu: {model} ({'; '.join(parts)})",
            "kernel paths this CPU cannot test: "
            + ("; ".join(missed) if missed else "none")]


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "/proc/cpuinfo"
    with open(path) as file:
        print("\n".join(describe(file.read())))
