"""ptxbridge.loaders: put a linked image on a device (CUDA driver or the CPU PTX interpreter)."""
