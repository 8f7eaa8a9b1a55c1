"""The memory budget shared by the library's blocked computations (:mod:`intertwine.measures`,
:mod:`intertwine.kernels`), in a module of its own so that either imports it without the other."""

#: Bytes of per-block intermediates a measure or kernel keeps at once (64 MiB).
DEFAULT_MAX_BYTES = 64 * 2**20
