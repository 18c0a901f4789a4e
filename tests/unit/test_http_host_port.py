"""How an HTTP tool's error names the service it could not reach."""

from __future__ import annotations

import pytest

from workers.handlers.http import host_port


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://billing.internal:8080/pay", "billing.internal:8080"),
        ("https://api.example.com/v1", "api.example.com:443"),
        ("http://api.example.com/v1", "api.example.com:80"),
        ("http://[::1]:8080/x", "[::1]:8080"),
        ("http://user:secret@10.0.0.5:9000/x", "10.0.0.5:9000"),  # never the credentials
    ],
)
def test_the_host_and_port_always_both_and_an_ipv6_address_bracketed(url: str, named: str) -> None:
    assert host_port(url) == named
