"""Evaluation metrics.

* :mod:`meshlift.metrics.image` — ``psnr``, ``ssim`` (torch).
* :mod:`meshlift.metrics.lpips` — LPIPS-Alex v0.1 in pure torch with packaged weights.
* :mod:`meshlift.metrics.geometry` — ``sample_surface``, ``mesh_metrics`` (Chamfer, F-score, normal
  consistency) from uniform surface samples.
"""
