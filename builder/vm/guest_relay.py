"""`python -m builder.vm.guest_relay HOST PORT`: one guest connection, relayed to HOST:PORT.

QEMU's guestfwd runs this once per TCP connection the guest opens to a forwarded address,
with the connection on stdin and stdout; it is the guest's only way out of `restrict=on`.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys


def relay(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=30) as upstream:
        upstream.settimeout(None)
        selector = selectors.DefaultSelector()
        selector.register(0, selectors.EVENT_READ, "guest")
        selector.register(upstream, selectors.EVENT_READ, "host")
        while True:
            for key, _ in selector.select():
                if key.data == "guest":
                    data = os.read(0, 65536)
                    if not data:
                        upstream.shutdown(socket.SHUT_WR)
                        selector.unregister(0)
                        continue
                    upstream.sendall(data)
                else:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    os.write(1, data)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m builder.vm.guest_relay HOST PORT", file=sys.stderr)
        raise SystemExit(2)
    try:
        relay(sys.argv[1], int(sys.argv[2]))
    except (OSError, ValueError) as exc:
        print(f"relay: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
