"""Fast paths behind meshlift's ops; the only package that imports ``triton`` (lazily, on first use).

- :mod:`meshlift.kernels.raster_triton`: Triton rasterizer (``rasterize`` + ``interpolate`` forward and
  backward), registered as the ``"triton"`` visibility backend.
"""
