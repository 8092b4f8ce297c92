"""A checkpoint's safetensors file (docs/ARCHITECTURE.md section 8), read
and edited with the standard library alone, for the tests and benchmarks
that compare weights or start from altered ones."""

import array
import json
import struct


def read_float32_tensors(path):
    """name -> array of floats; ValueError if a tensor is not F32 (a
    checkpoint's weights and optimizer state are float32)."""
    with open(path, "rb") as file:
        data = file.read()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {entry['dtype']}, not F32")
        begin, end = entry["data_offsets"]
        values = array.array("f")
        values.frombytes(data[8 + length + begin:8 + length + end])
        tensors[name] = values
    return tensors


def zero_tensors(path, chosen):
    """Zeroes in place every tensor of the file whose name `chosen` accepts
    (zero is all zero bits in every float dtype); returns how many."""
    with open(path, "rb") as file:
        data = bytearray(file.read())
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    zeroed = 0
    for name, entry in header.items():
        if name == "__metadata__" or not chosen(name):
            continue
        begin, end = entry["data_offsets"]
        data[8 + length + begin:8 + length + end] = bytes(end - begin)
        zeroed += 1
    with open(path, "wb") as file:
        file.write(data)
    return zeroed
