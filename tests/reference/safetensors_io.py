#!/usr/bin/python3
"""Minimal safetensors writer/reader (the `safetensors` package is not installed here).

Format (https://github.com/huggingface/safetensors): an 8-byte little-endian u64 N, then N bytes of
UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
padded with spaces to a multiple of 8, then the raw little-endian tensor bytes, offsets relative
to the end of the header. Tensors are laid out in sorted-name order, contiguous, row-major.
"""
import json
import struct

import numpy as np
import torch

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def _raw_bytes(t, dtype):
    t = t.detach().to(_DTYPES[dtype]).contiguous().cpu()
    if dtype == "BF16":          # numpy has no bfloat16: reinterpret the 16-bit pattern
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def save(tensors, path, dtype="F32", metadata=None):
    """tensors: {name: torch.Tensor}; dtype F32|F16|BF16|F64 applied to every tensor."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}")
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        raw = _raw_bytes(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hdr = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hdr += b" " * (-len(hdr) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for raw in blobs:
            f.write(raw)


def load(path):
    """-> ({name: torch.Tensor}, metadata). Used to round-trip-check `save`."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n).decode("utf-8"))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        buf = data[b:e]
        if info["dtype"] == "BF16":
            t = torch.from_numpy(np.frombuffer(buf, dtype="<i2").copy()).view(torch.bfloat16)
        else:
            np_dtype = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}[info["dtype"]]
            t = torch.from_numpy(np.frombuffer(buf, dtype=np_dtype).copy())
        out[name] = t.reshape(info["shape"])
    return out, meta
