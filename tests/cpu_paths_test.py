"""cpu_paths.py names the paths a CPU's flags leave untested."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_paths  # noqa: E402
import junit  # noqa: E402


def cpuinfo(model, flags):
    processor = f"processor\t: 0\nmodel name\t: {model}\nflags\t\t: {flags}\n"
    return processor + "\n" + processor.replace(": 0", ": 1")


class CpuPathsTest(unittest.TestCase):

    def test_an_avx2_cpu_misses_the_avx512_and_bf16_paths(self):
        lines = cpu_paths.describe(cpuinfo("AMD EPYC", "sse4_2 avx fma avx2"))
        self.assertEqual(lines[0], "cpu: AMD EPYC (has avx2 fma; lacks avx512f "
                         "avx512bw avx512_bf16 amx_bf16 amx_tile)")
        self.assertIn("AVX-512 kernels", lines[1])
        self.assertIn("AVX-512 BF16", lines[1])
        self.assertIn("AMX", lines[1])
        self.assertNotIn("AVX2 kernels", lines[1])

    def test_an_amx_cpu_misses_nothing(self):
        lines = cpu_paths.describe(cpuinfo(
            "Intel Xeon", "avx2 fma avx512f avx512bw avx512_bf16 amx_bf16 "
            "amx_tile"))
        self.assertEqual(lines[1], "kernel paths this CPU cannot test: none")

    def test_a_cpu_below_avx2_misses_every_vector_path(self):
        lines = cpu_paths.describe(cpuinfo("Old", "sse2 sse4_1 avx"))
        self.assertEqual(lines[0], "cpu: Old (lacks avx2 fma avx512f avx512bw "
                         "avx512_bf16 amx_bf16 amx_tile)")
        self.assertIn("the AVX2 kernels", lines[1])
        self.assertIn("AMX", lines[1])


if __name__ == "__main__":
    junit.main()
