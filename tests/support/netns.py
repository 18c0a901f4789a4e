"""Hosts on one machine: network namespaces joined by a bridge, made and removed by a test.

Each host is a namespace with one veth interface on a private /24; the bridge, in the
test's own namespace, is their switch and has the subnet's ``.1``, so the test reaches every
host. Nothing is routed anywhere else: traffic stays on this machine. A host's link is cut
by taking its bridge port down (its packets vanish, as when a cable is pulled: nobody
is told), and one host's traffic to another is dropped silently by pointing the second
host's address, in the first host's neighbour table, at a hardware address nobody has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


class NamespacesUnavailable(RuntimeError):
    """This machine (or this user) cannot make network namespaces."""


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")


# A locally administered unicast address no host on the bridge has: frames to it are lost.
NOBODY_MAC = "02:00:00:00:00:01"


@dataclass(frozen=True)
class Host:
    name: str
    ns: str
    ip: str
    port: str  # the bridge's side of its link

    def run(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host."""
        return ["ip", "netns", "exec", self.ns, *argv]


class Network:
    def __init__(self, subnet: int) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise NamespacesUnavailable("network namespaces need root and iproute2")
        self.tag = f"{os.getpid() % 100000}"
        self.prefix = f"10.213.{subnet}"
        self.bridge = f"trb{self.tag}"
        self.hosts: dict[str, Host] = {}
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
        except RuntimeError as exc:
            raise NamespacesUnavailable(str(exc)) from None
        _ip("addr", "add", f"{self.prefix}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self, name: str) -> Host:
        number = len(self.hosts) + 2
        ns, port = f"tr{self.tag}-{name}", f"trp{self.tag}x{number}"
        _ip("netns", "add", ns)
        _ip("link", "add", port, "type", "veth", "peer", "name", f"trh{self.tag}x{number}")
        _ip("link", "set", f"trh{self.tag}x{number}", "netns", ns)
        _ip("link", "set", f"trh{self.tag}x{number}", "name", "eth0", ns=ns)
        _ip("addr", "add", f"{self.prefix}.{number}/24", "dev", "eth0", ns=ns)
        _ip("link", "set", "eth0", "up", ns=ns)
        _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "set", port, "master", self.bridge)
        _ip("link", "set", port, "up")
        host = Host(name, ns, f"{self.prefix}.{number}", port)
        self.hosts[name] = host
        return host

    def cut(self, host: Host) -> None:
        """Pull ``host``'s cable: its packets vanish both ways."""
        _ip("link", "set", host.port, "down")

    def restore(self, host: Host) -> None:
        _ip("link", "set", host.port, "up")

    def drop(self, source: Host, destination: Host) -> None:
        """Lose what ``source`` sends to ``destination``, silently, connections open or new."""
        _ip("neigh", "replace", destination.ip, "lladdr", NOBODY_MAC, "dev", "eth0",
            "nud", "permanent", ns=source.ns)  # fmt: skip

    def undrop(self, source: Host, destination: Host) -> None:
        _ip("neigh", "del", destination.ip, "dev", "eth0", ns=source.ns)

    def close(self) -> None:
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.ns], capture_output=True, timeout=30)
            subprocess.run(["ip", "link", "del", host.port], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
