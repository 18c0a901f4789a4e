"""`up` refuses the API and Flower on one port of one address before anything starts; on
two addresses (two loopback ones, say) both can bind."""

from __future__ import annotations

import pytest

from router.cli.preflight import UpRefused, check_ports
from router.settings import Settings

from ..support.launcher import free_port


@pytest.mark.parametrize(
    ("api_host", "flower_host", "refused"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.2", False),
    ],
)
def test_one_port_is_refused_only_on_one_address(
    api_host: str, flower_host: str, refused: bool
) -> None:
    port = free_port()
    settings = Settings(api_host=api_host, flower_host=flower_host, api_port=port, flower_port=port)
    if refused:
        with pytest.raises(UpRefused, match=f"both {port}"):
            check_ports(settings)
    else:
        check_ports(settings)
