"""CUDA code built twice: for the GPU, and emulated on the CPU.

Every CUDA target comes in two twins. `name` is the real one: .cu sources
compiled by nvcc in a genrule (no rules_cuda offline), host code linked
against the CUDA runtime. `name_emulated` is the same sources compiled by the
host compiler with PLATEAU_CUDA_EMULATION, against kernels/cuda/emulation
(a CPU stand-in for the runtime, cuBLAS and the kernel language), so that
machines without a GPU run the very kernels and host logic the GPU runs.
A binary links one twin or the other, never both.

Without the CUDA toolkit (bazel/cuda_configure.bzl), the emulated twins are
built as ever and the real ones are not, except where a target names
`absent_srcs`: its real twin is then those sources, which say that the build
has no CUDA. A real test twin becomes one test case that is skipped, saying
why, so that it is counted as skipped rather than silently missing.
"""

load("@cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

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

_ABSENT_TEST = "//bazel:cuda_absent_test"

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
    if CUDA_AVAILABLE:
        archive = "lib%s_cuda.a" % name
        native.genrule(
            name = name + "_nvcc",
            srcs = srcs + hdrs + nvcc_hdrs,
            outs = [archive],
            cmd = "%s %s -lib -o $@ %s" % (
                NVCC,
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
        private_hdrs = [],
        deps = [],
        cuda_deps = [],
        absent_srcs = None,
        absent_deps = [],
        emulated = True,
        visibility = None,
        testonly = False):
    """Host code that calls CUDA (through kernels/cuda/cuda_api.h), in both twins.

    Args:
      name: the real twin; the emulated one is name + "_emulated".
      srcs: .cc files.
      hdrs: headers.
      private_hdrs: headers only srcs include (may include CUDA's headers).
      deps: cc deps of both twins (plain C++, no CUDA).
      cuda_deps: deps that have twins themselves (give the real label).
      absent_srcs: the real twin's sources without the CUDA toolkit, which
        implement hdrs by saying the build has no CUDA; None: no real twin
        without the toolkit.
      absent_deps: further deps of absent_srcs.
      emulated: whether there is an emulated twin (NCCL has no emulation).
      visibility: as for cc_library.
      testonly: as for cc_library.
    """
    if CUDA_AVAILABLE:
        native.cc_library(
            name = name,
            srcs = srcs + private_hdrs,
            hdrs = hdrs,
            deps = deps + cuda_deps + ["@cuda//:cudart"],
            visibility = visibility,
            testonly = testonly,
        )
    elif absent_srcs != None:
        native.cc_library(
            name = name,
            srcs = absent_srcs,
            hdrs = hdrs,
            deps = deps + absent_deps,
            visibility = visibility,
            testonly = testonly,
        )
    if emulated:
        native.cc_library(
            name = name + "_emulated",
            srcs = srcs + private_hdrs,
            hdrs = hdrs,
            defines = ["PLATEAU_CUDA_EMULATION"],
            deps = deps + _emulated(cuda_deps) + [_EMULATION],
            visibility = visibility,
            testonly = testonly,
        )

def cuda_binary(name, srcs, deps = [], cuda_deps = []):
    """A program that needs the real CUDA twins; not built without the toolkit.

    Args:
      name: as for cc_binary.
      srcs: as for cc_binary.
      deps: plain C++ deps.
      cuda_deps: twinned deps (give the real label).
    """
    if CUDA_AVAILABLE:
        native.cc_binary(name = name, srcs = srcs, deps = deps + cuda_deps)

def cuda_test(
        name,
        srcs,
        deps = [],
        cuda_deps = [],
        size = "small",
        data = [],
        args = [],
        tags = [],
        emulated = True):
    """A test of CUDA code, in both twins: `name` runs on a GPU (its cases
    skip where there is none; tagged "gpu") and `name_emulated` on the CPU
    emulation. Without the CUDA toolkit, `name` is one skipped case.

    Args:
      name: the real twin.
      srcs: test sources.
      deps: deps of both (plain C++).
      cuda_deps: twinned deps (give the real label).
      size: as for cc_test.
      data: as for cc_test.
      args: as for cc_test.
      tags: as for cc_test.
      emulated: whether there is an emulated twin.
    """
    if CUDA_AVAILABLE:
        native.cc_test(
            name = name,
            srcs = srcs,
            size = size,
            data = data,
            args = args,
            tags = tags + ["gpu"],
            deps = deps + cuda_deps + ["@cuda//:cudart"],
        )
    else:
        native.cc_test(
            name = name,
            size = "small",
            tags = tags + ["gpu"],
            deps = [_ABSENT_TEST],
        )
    if emulated:
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
