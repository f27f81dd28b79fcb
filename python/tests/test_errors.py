"""The error names of tsdf.ErrorCode are common/tsdf_error.h's, exactly."""

import re

import pytest

from tsdf import ArgumentError, ErrorCode, TsdfError

from conftest import SOURCE_DIR

HEADER = SOURCE_DIR / "common" / "tsdf_error.h"


def header_codes():
    """(name, value) of every X(name, value, ...) entry of TSDF_ERRNO_MAP."""
    text = HEADER.read_text()
    start = text.index("#define TSDF_ERRNO_MAP(X)")
    # The macro ends at the first line that does not continue it.
    body = []
    for line in text[start:].splitlines():
        body.append(line)
        if not line.rstrip().endswith("\\"):
            break
    codes = re.findall(r"\bX\(\s*([A-Z0-9_]+)\s*,\s*(-?\d+)\s*,", "\n".join(body))
    return [(name, int(value)) for name, value in codes]


def test_header_table_is_read():
    codes = header_codes()
    assert len(codes) >= 30, "TSDF_ERRNO_MAP parsed to too few entries"
    assert ("INVAL", -1) in codes and ("BAD_INTRINSICS", -3) in codes


def test_every_code_matches_the_header():
    header = dict(header_codes())
    python = {c.name: int(c) for c in ErrorCode}
    missing = sorted(set(header) - set(python), key=header.get, reverse=True)
    assert not missing, f"add to tsdf/errors.py: {[(n, header[n]) for n in missing]}"
    extra = sorted(set(python) - set(header))
    assert not extra, f"not in common/tsdf_error.h: {extra}"
    wrong = {n: (python[n], header[n]) for n in header if python[n] != header[n]}
    assert not wrong, f"values differ (python, header): {wrong}"
    assert [c.name for c in sorted(ErrorCode, reverse=True)] == [n for n, _ in header_codes()]


def test_error_carries_code_and_name():
    e = TsdfError(-3, "fx is 0.05")
    assert e.code is ErrorCode.BAD_INTRINSICS and e.name == "BAD_INTRINSICS"
    assert "BAD_INTRINSICS (-3): fx is 0.05" == str(e)


def test_unknown_code_keeps_the_daemons_name():
    e = TsdfError(-999, "from a newer daemon", name="SOMETHING_NEW")
    assert e.code == -999 and not isinstance(e.code, ErrorCode) and e.name == "SOMETHING_NEW"


def test_argument_error_is_a_value_error():
    with pytest.raises(ValueError):
        raise ArgumentError(ErrorCode.BAD_SIZE, "shape")
