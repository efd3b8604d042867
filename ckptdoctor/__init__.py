"""ckptdoctor: a checkpoint doctor for machine-learning training runs."""

__version__ = "0.1.0"
