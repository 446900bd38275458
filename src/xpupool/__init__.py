"""xpupool: one pool and one scheduler for a mixed fleet of GPUs, NPUs, MLUs and DCUs."""

__version__ = "0.1.0"
