"""intertwine: the symmetries of deep learning models and their internal representations."""

__version__ = "0.1.0"
