"""The package's version is the C project's (top CMakeLists.txt)."""

import importlib.metadata
import re

import pytest

import tsdf

from conftest import SOURCE_DIR


def cmake_version():
    text = (SOURCE_DIR / "CMakeLists.txt").read_text()
    match = re.search(r"^project\(\s*tsdfd\s+VERSION\s+([0-9][0-9.]*)", text, re.M)
    assert match, "project(tsdfd VERSION ...) not found in CMakeLists.txt"
    return match.group(1)


def test_version_is_the_cmake_projects():
    assert tsdf.__version__ == cmake_version(), "bump python/tsdf/_version.py with CMakeLists.txt"


def test_installed_metadata_has_the_version():
    try:
        installed = importlib.metadata.version("tsdf-client")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tsdf-client is not installed (tests run from the source tree)")
    assert installed == tsdf.__version__


def test_daemon_reports_the_same_version(client):
    assert client.ping().server == f"tsdfd {tsdf.__version__}"
