"""TEST DOUBLE: version of the sglang package this double mirrors."""

__version__ = "0.5.23+testdouble"
