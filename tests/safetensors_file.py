"""A checkpoint's tensors and safetensors files (docs/ARCHITECTURE.md
section 8), read and edited with the standard library alone, for the tests
and benchmarks that compare weights or start from altered ones."""

import array
import json
import os
import struct


def _tensor_ranges(data):
    """(name, dtype, begin, end) of each tensor of the file's bytes, its
    data at data[begin:end]."""
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        yield name, entry["dtype"], 8 + length + begin, 8 + length + end


def read_float32_tensors(path):
    """name -> array of floats; ValueError if a tensor is not F32 (a
    checkpoint's weights and optimizer state are float32)."""
    with open(path, "rb") as file:
        data = file.read()
    tensors = {}
    for name, dtype, begin, end in _tensor_ranges(data):
        if dtype != "F32":
            raise ValueError(f"{path}: {name} is {dtype}, not F32")
        values = array.array("f")
        values.frombytes(data[begin:end])
        tensors[name] = values
    return tensors


def read_checkpoint_tensors(step_dir, part="weights"):
    """name -> array of floats of a checkpoint's whole tensors, `part`
    "weights" or "optimizer_state", from either version: version 1's
    model.safetensors or optimizer.safetensors, or version 2's chunks as
    MANIFEST.json indexes them (every rank's file)."""
    with open(os.path.join(step_dir, "MANIFEST.json")) as file:
        manifest = json.load(file)
    if manifest["version"] == 1:
        name = ("model.safetensors" if part == "weights"
                else "optimizer.safetensors")
        return read_float32_tensors(os.path.join(step_dir, name))
    files = {}
    tensors = {}
    for name, tensor in manifest[part].items():
        elements = 1
        for dimension in tensor["shape"]:
            elements *= dimension
        values = array.array("f", bytes(4 * elements))
        for chunk in tensor["chunks"]:
            if chunk["file"] not in files:
                with open(os.path.join(step_dir, chunk["file"]), "rb") as file:
                    files[chunk["file"]] = file.read()
            data = files[chunk["file"]]
            begin, end = chunk["begin"], chunk["end"]
            stored = array.array("f")
            stored.frombytes(data[chunk["offset"]:
                                  chunk["offset"] + 4 * (end - begin)])
            values[begin:end] = stored
        tensors[name] = values
    return tensors


def zero_tensors(path, chosen):
    """Zeroes in place every tensor of the file whose name `chosen` accepts
    (zero is all zero bits in every float dtype); returns how many."""
    with open(path, "rb") as file:
        data = bytearray(file.read())
    zeroed = 0
    for name, _, begin, end in _tensor_ranges(data):
        if chosen(name):
            data[begin:end] = bytes(end - begin)
            zeroed += 1
    with open(path, "wb") as file:
        file.write(data)
    return zeroed
