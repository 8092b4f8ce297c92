"""cuda_library: .cu sources compiled by nvcc in a genrule (no rules_cuda offline)."""

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

def cuda_library(name, srcs, hdrs = [], nvcc_hdrs = [], deps = [], visibility = None, testonly = False):
    """A cc_library whose implementation is the given .cu files.

    Args:
      name: the cc_library to create.
      srcs: .cu files, compiled together into one static archive.
      hdrs: the library's public C++ headers.
      nvcc_hdrs: further headers the .cu files include (from other packages).
      deps: cc deps of the public headers.
      visibility: as for cc_library.
      testonly: as for cc_library.
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
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_import(
        name = name + "_archive",
        static_library = archive,
        alwayslink = True,
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        hdrs = hdrs,
        deps = deps + [
            ":" + name + "_archive",
            "@cuda//:cudart",
        ],
        visibility = visibility,
        testonly = testonly,
    )
