# The package's version. It is the C project's version, defined once in the
# top CMakeLists.txt (project(tsdfd VERSION ...)); python/tests/test_version.py
# fails when the two differ, so bump both together.
__version__ = "0.1.0"
