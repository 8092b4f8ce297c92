"""A checkpoint's safetensors file (docs/ARCHITECTURE.md section 8), read
and edited with the standard library alone, for the tests and benchmarks
that compare weights or start from altered ones."""

import array
import json
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
