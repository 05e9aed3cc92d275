"""Distortion parameters per COLMAP camera model, moderate (a real lens's order of magnitude), shared by tests."""

MODEL_PARAMS = {
    "SIMPLE_PINHOLE": [],
    "PINHOLE": [],
    "SIMPLE_RADIAL": [-0.3],
    "RADIAL": [-0.2, 0.05],
    "OPENCV": [0.0578, -0.0805, -0.00098, 0.000156],
    "OPENCV_FISHEYE": [0.05, -0.01, 0.004, -0.001],
    "FULL_OPENCV": [-0.1, 0.02, 0.001, -0.002, 0.001, 0.05, -0.01, 0.002],
    "FOV": [0.9],
    "SIMPLE_RADIAL_FISHEYE": [0.05],
    "RADIAL_FISHEYE": [0.05, -0.01],
    "THIN_PRISM_FISHEYE": [0.05, -0.01, 0.001, -0.001, 0.002, -0.001, 0.001, -0.002],
}
