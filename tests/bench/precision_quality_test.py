"""precision_quality.py's pieces that need no training: the example spec it
edits (so that a change to deploy/examples/tiny-moe.yaml that it would
misread fails here) and its statistics.

Usage: precision_quality_test.py PRECISION_QUALITY_PY EXAMPLE_SPEC
"""

import array
import importlib.util
import json
import math
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import junit  # noqa: E402
import safetensors_file  # noqa: E402

SCRIPT, EXAMPLE = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
spec = importlib.util.spec_from_file_location("precision_quality", SCRIPT)
precision_quality = importlib.util.module_from_spec(spec)
spec.loader.exec_module(precision_quality)


class SpecForTest(unittest.TestCase):

    def setUp(self):
        with open(EXAMPLE) as file:
            self.example = file.read()

    def test_changes_the_seed_precision_and_data_and_nothing_else(self):
        edited = precision_quality.spec_for(
            self.example, "/corpus/brown", 7,
            precision_quality.COMPARISONS["precision"]["fp32"])
        self.assertIn("seed: 7,", edited)
        self.assertIn("\nprecision: fp32", edited)
        self.assertIn("path: /corpus/brown,", edited)
        changed = [(before, after) for before, after in
                   zip(self.example.splitlines(), edited.splitlines())
                   if before != after]
        self.assertEqual(len(changed), 3, changed)
        self.assertEqual(len(self.example.splitlines()),
                         len(edited.splitlines()))

    def test_gradients_keeps_bf16_and_adds_the_accumulation(self):
        for side in ("fp32", "bf16"):
            edited = precision_quality.spec_for(
                self.example, "data", 1,
                precision_quality.COMPARISONS["gradients"][side])
            self.assertIn("\nprecision: bf16", edited)
            self.assertTrue(
                edited.endswith(f"\ngradient_accumulation: {side}\n"),
                edited)
            self.assertEqual(len(edited.splitlines()),
                             len(self.example.splitlines()) + 1)

    def test_a_spec_without_a_seed_is_refused(self):
        without_seed = self.example.replace("seed: 1,", "")
        with self.assertRaisesRegex(ValueError, "seed"):
            precision_quality.spec_for(without_seed, "data", 1,
                                       {"precision": "bf16"})

    def test_a_spec_that_sets_an_added_field_is_refused(self):
        with self.assertRaisesRegex(ValueError, "gradient_accumulation"):
            precision_quality.spec_for(
                self.example + "gradient_accumulation: bf16\n", "data", 1,
                precision_quality.COMPARISONS["gradients"]["fp32"])


class OneStepTest(unittest.TestCase):

    def test_with_steps_sets_the_run_length_and_no_evaluation(self):
        with open(EXAMPLE) as file:
            example = file.read()
        edited = precision_quality.with_steps(example, 101, 101)
        self.assertIn("steps: 101, checkpoint_every: 101, eval_every: 0,",
                      edited)
        # warmup_steps is another field.
        self.assertIn("warmup_steps: 20", edited)
        with self.assertRaisesRegex(ValueError, "eval_every"):
            precision_quality.with_steps(
                example.replace("eval_every: 50,", ""), 2, 2)

    def test_reads_the_float32_weights_of_a_checkpoint(self):
        values = array.array("f", [1.5, -2.0, 0.25])
        header = json.dumps({
            "__metadata__": {"format": "pt"},
            "w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
        }).encode()
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as file:
            file.write(struct.pack("<Q", len(header)) + header +
                       values.tobytes())
            file.flush()
            self.assertEqual(
                list(safetensors_file.read_float32_tensors(file.name)["w"]),
                [1.5, -2.0, 0.25])

    def test_update_differences(self):
        before = {"a": [1.0, 1.0], "still": [3.0]}
        # a's fp32 update (1, 0); bf16's (1, 0.1): difference 0.1 of it,
        # projection 1. b's bf16 update is twice fp32's: projection 2.
        fp32 = {"a": [2.0, 1.0], "still": [3.0]}
        bf16 = {"a": [2.0, 1.1], "still": [3.0]}
        differences = precision_quality.update_differences(before, fp32, bf16)
        self.assertEqual(sorted(differences), ["a"])
        relative, projection = differences["a"]
        self.assertAlmostEqual(relative, 0.1)
        self.assertAlmostEqual(projection, 1.0)
        _, doubled = precision_quality.update_differences(
            {"b": [0.0]}, {"b": [1.0]}, {"b": [2.0]})["b"]
        self.assertAlmostEqual(doubled, 2.0)


class CompareTest(unittest.TestCase):

    def test_one_seed_has_no_interval(self):
        ratio, interval = precision_quality.compare([(200.0, 210.0)])
        self.assertAlmostEqual(ratio, 1.05)
        self.assertIsNone(interval)

    def test_the_mean_is_geometric_and_the_interval_students(self):
        # Log ratios +-log(1.1): mean 0, sample deviation sqrt(2) log(1.1),
        # half-width t(1) x that / sqrt(2) = 12.706 log(1.1).
        ratio, (low, high) = precision_quality.compare([(100.0, 110.0),
                                                        (110.0, 100.0)])
        self.assertAlmostEqual(ratio, 1.0)
        self.assertAlmostEqual(math.log(high), 12.706 * math.log(1.1))
        self.assertAlmostEqual(math.log(low), -12.706 * math.log(1.1))


if __name__ == "__main__":
    junit.main()
