"""CUDA code built twice: for the GPU, and emulated on the CPU.

Every CUDA target comes in two twins. `name` is the real one: .cu sources
compiled by nvcc in a genrule (no rules_cuda offline), host code linked
against the CUDA runtime. `name_emulated` is the same sources compiled by the
host compiler with PLATEAU_CUDA_EMULATION, against kernels/cuda/emulation
(a CPU stand-in for the runtime, cuBLAS and the kernel language), so that
machines without a GPU run the very kernels and host logic the GPU runs.
A binary links one twin or the other, never both.
"""

# Hopper (H100/H200) machine code plus PTX, so newer GPUs can JIT the kernels.
_NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O2",
    "-I.",
    "-Xcompiler -fPIC,-Wall,-Werror",
    "-Werror all-warnings",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
])

_EMULATION = "//kernels/cuda:emulation"

def _emulated(labels):
    return [label + "_emulated" for label in labels]

def cuda_library(
        name,
        srcs,
        hdrs = [],
        nvcc_hdrs = [],
        deps = [],
        cuda_deps = [],
        visibility = None):
    """Kernels (.cu files) and their launchers' headers, in both twins.

    Args:
      name: the real twin; the emulated one is name + "_emulated".
      srcs: .cu files.
      hdrs: the library's public headers (seen by nvcc too).
      nvcc_hdrs: further headers the .cu files include (from other packages).
      deps: cc deps of both twins (plain C++, no CUDA).
      cuda_deps: deps that have twins themselves (give the real label).
      visibility: as for cc_library.
    """
    archive = "lib%s_cuda.a" % name
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs + nvcc_hdrs,
        outs = [archive],
        cmd = "/usr/local/cuda/bin/nvcc %s -lib -o $@ %s" % (
            _NVCC_FLAGS,
            " ".join(["$(location %s)" % src for src in srcs]),
        ),
        visibility = ["//visibility:private"],
    )
    native.cc_import(
        name = name + "_archive",
        static_library = archive,
        alwayslink = True,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        hdrs = hdrs,
        # The archive first: its undefined symbols come from what follows.
        deps = [":" + name + "_archive"] + deps + cuda_deps + [
            "@cuda//:cudart",
        ],
        visibility = visibility,
    )

    # Emulated: one host translation unit per .cu file (their file-local
    # helpers would collide in one), each including its .cu.
    wrappers = []
    for src in srcs:
        wrapper = "%s_emulated_%s.cc" % (name, src.replace("/", "_"))
        native.genrule(
            name = wrapper + "_gen",
            outs = [wrapper],
            cmd = "echo '#include \"%s/%s\"' > $@" % (native.package_name(), src),
            visibility = ["//visibility:private"],
        )
        wrappers.append(wrapper)
    native.cc_library(
        name = name + "_emulated",
        srcs = wrappers,
        hdrs = hdrs,
        textual_hdrs = srcs,
        defines = ["PLATEAU_CUDA_EMULATION"],
        deps = deps + _emulated(cuda_deps) + [_EMULATION],
        visibility = visibility,
    )

def cuda_host_library(
        name,
        srcs,
        hdrs = [],
        deps = [],
        cuda_deps = [],
        runtime_deps = ["@cuda//:cudart"],
        visibility = None,
        testonly = False):
    """Host code that calls CUDA (through kernels/cuda/cuda_api.h), in both twins.

    Args:
      name: the real twin; the emulated one is name + "_emulated".
      srcs: .cc files.
      hdrs: headers.
      deps: cc deps of both twins (plain C++, no CUDA).
      cuda_deps: deps that have twins themselves (give the real label).
      runtime_deps: the real twin's CUDA libraries (the emulated twin has
        kernels/cuda/emulation instead).
      visibility: as for cc_library.
      testonly: as for cc_library.
    """
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + cuda_deps + runtime_deps,
        visibility = visibility,
        testonly = testonly,
    )
    native.cc_library(
        name = name + "_emulated",
        srcs = srcs,
        hdrs = hdrs,
        defines = ["PLATEAU_CUDA_EMULATION"],
        deps = deps + _emulated(cuda_deps) + [_EMULATION],
        visibility = visibility,
        testonly = testonly,
    )

def cuda_test(name, srcs, deps = [], cuda_deps = [], size = "small", data = [], args = [], tags = []):
    """A test of CUDA code, in both twins: `name` runs on a GPU (its cases
    skip where there is none; tagged "gpu") and `name_emulated` on the CPU
    emulation.

    Args:
      name: the real twin.
      srcs: test sources.
      deps: deps of both (plain C++).
      cuda_deps: twinned deps (give the real label).
      size: as for cc_test.
      data: as for cc_test.
      args: as for cc_test.
      tags: as for cc_test.
    """
    native.cc_test(
        name = name,
        srcs = srcs,
        size = size,
        data = data,
        args = args,
        tags = tags + ["gpu"],
        deps = deps + cuda_deps + ["@cuda//:cudart"],
    )
    native.cc_test(
        name = name + "_emulated",
        srcs = srcs,
        size = size,
        data = data,
        args = args,
        tags = tags,
        defines = ["PLATEAU_CUDA_EMULATION"],
        deps = deps + _emulated(cuda_deps) + [_EMULATION],
    )
