"""Writes tests/data/npy/*.npy: reference files written by numpy's own writer, read by
tests/npy_strict_test.cc. Run with any numpy: python3 tests/data/npy/make.py

  v<major>_<dtype>_<shape>.npy  np.lib.format.write_array with version (1, 0), (2, 0) or (3, 0)
  v1_float32_16aligned.npy      a header padded to 16 bytes, as numpy before 1.14 and cnpy wrote it
"""
import os
import struct

import numpy as np

OUT = os.path.dirname(os.path.abspath(__file__))

ARRAYS = {
    "float32_2x3": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
    "int64_3": np.array([-1, 0, 1 << 40], dtype=np.int64),
    "bool_4": np.array([True, False, False, True]),
    "float16_2": np.array([1.5, -2.0], dtype=np.float16),
    "float32_scalar": np.array(3.25, dtype=np.float32),
    "int64_empty": np.zeros((0,), dtype=np.int64),
}


def write(name, version, a):
    with open(os.path.join(OUT, name), "wb") as f:
        np.lib.format.write_array(f, a, version=version, allow_pickle=False)


for version in [(1, 0), (2, 0)]:
    for key, a in ARRAYS.items():
        write("v%d_%s.npy" % (version[0], key), version, a)
write("v3_float32_2x3.npy", (3, 0), ARRAYS["float32_2x3"])

# numpy's dict with 16-byte alignment instead of 64.
a = ARRAYS["float32_2x3"]
d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
pad = (16 - (10 + len(d) + 1) % 16) % 16
h = (d + " " * pad + "\n").encode("latin1")
with open(os.path.join(OUT, "v1_float32_16aligned.npy"), "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + a.tobytes())
assert np.array_equal(np.load(os.path.join(OUT, "v1_float32_16aligned.npy")), a)
