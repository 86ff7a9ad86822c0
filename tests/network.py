"""Network helpers for the tests of backend addresses: a record of every outgoing connection this process
attempts (anything but loopback is refused by the recorder itself, before a packet leaves, so even wrong code
under test cannot reach another machine), listeners that count who connected, and a tiny scripted HTTP
server on loopback."""

import contextlib
import ipaddress
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The embedded default of AREAL_BACKEND_ALLOWED_HOSTS (areal_web/settings/base.py) with the default inference
# port: the two serving slots on loopback, plus any globally routable address.
EMBEDDED_ALLOWED_HOSTS = ["127.0.0.1:8100", "127.0.0.1:8101", "[::1]:8100", "[::1]:8101", "public"]


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def connections_recorded():
    """Yields the list of (host, port) this process tries to connect to meanwhile, from any thread. A
    connection to a non-loopback address is refused here, without touching the network."""
    attempts: list[tuple[str, int]] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(address):
        if isinstance(address, tuple):
            attempts.append((address[0], address[1]))
            if not _is_loopback(address[0]):
                raise ConnectionRefusedError(f"test guard: no connection off this machine ({address[0]})")

    def connect(sock, address):
        check(address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        check(address)
        return real_connect_ex(sock, address)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    try:
        yield attempts
    finally:
        socket.socket.connect, socket.socket.connect_ex = real_connect, real_connect_ex


class Listener:
    """A loopback TCP port that accepts nothing by itself: `connected()` says whether anyone connected."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.socket.setblocking(False)
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def connected(self) -> bool:
        try:
            peer, _ = self.socket.accept()
        except BlockingIOError:
            return False
        peer.close()
        return True

    def close(self) -> None:
        self.socket.close()


@contextlib.contextmanager
def listener():
    port = Listener()
    try:
        yield port
    finally:
        port.close()


@contextlib.contextmanager
def scripted_http_server(routes: dict):
    """Serves `routes` {(method, path): (status, headers, body bytes or JSON-able)} on a free loopback port;
    yields (base URL, list of (method, path) requests received)."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            received.append((self.command, self.path))
            status, headers, body = routes.get((self.command, self.path), (404, {}, {"error": "no route"}))
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
