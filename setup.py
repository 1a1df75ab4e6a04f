# The C core is compiled by cffi while the package installs (pip install .); never by hand.
from setuptools import setup

setup(cffi_modules=["c_ext/build.py:ffibuilder"])
