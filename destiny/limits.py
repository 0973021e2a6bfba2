"""The one bound that follows from how Destiny stores indices (no imports: the JSON parser
reads it without loading NumPy's or numba's modules)."""

# Feature, sample and unit indices are int32 (uint32 in DSSTNE): in the datasets' `indices`,
# the kernels' index arrays and the index files' numbers. A dataset's width, a layer's N and
# an index file's entry are at most this.
MAX_INDEX = 2**31 - 1
