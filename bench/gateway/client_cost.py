"""What the gateway's forwarding client costs per request, against the least any client must do (issue 30).

The same whole (non-streamed) chat request goes, one at a time on one keep-alive connection, to this bench's
instant upstream (upstream.py) from two clients on uvloop in this process:
- **aiohttp**: `ClientSession.post` with the options of apps/gateway/forward.py's session, the body read whole;
- **floor**: an asyncio protocol that writes the request's bytes and parses the answer with httptools (the
  parser uvicorn uses), which is the least a forwarding client does for this request; not a usable client (no
  pool, no redirects or errors handled, no TLS, no address checks).
Rounds alternate the two. It prints, per client, the CPU of this process and the wall time per request
(median over rounds), and aiohttp's figures as multiples of the floor's.

    .venv/bin/python -m bench.gateway.client_cost [--requests 3000] [--rounds 3]
"""

import argparse
import asyncio
import json
import statistics
import time

from bench.gateway.upstream import free_port, running_upstream

BODY = json.dumps(
    {
        "model": "bench-model",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "logprobs": True,
    }
).encode()


class _Floor(asyncio.Protocol):
    """One connection: a request's bytes out, its answer parsed by httptools, one request at a time."""

    def __init__(self):
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.answer: asyncio.Future | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.parser.feed_data(data)

    def on_body(self, body):
        self.body.append(body)

    def on_message_complete(self):
        answer, self.answer = self.answer, None
        body, self.body = b"".join(self.body), []
        if answer is not None:
            answer.set_result((self.parser.get_status_code(), body))


async def _floor_client(host: str, port: int):
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(_Floor, host, port)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode()

    async def post():
        protocol.answer = loop.create_future()
        protocol.transport.write(head + BODY)
        status, body = await protocol.answer
        if status != 200 or not body:
            raise RuntimeError(f"the upstream answered {status}")

    return post, protocol.transport.close


async def _aiohttp_client(host: str, port: int):
    import aiohttp

    session = aiohttp.ClientSession(  # the options of apps/gateway/forward.py's session
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=300.0),
        connector=aiohttp.TCPConnector(limit=512, limit_per_host=256, ttl_dns_cache=300),
        skip_auto_headers=("User-Agent",),
        read_bufsize=8 * 1024 * 1024,
    )
    url = f"http://{host}:{port}/v1/chat/completions"

    async def post():
        async with session.post(
            url, data=BODY, headers={"Content-Type": "application/json"}, allow_redirects=False
        ) as response:
            body = await response.read()
            if response.status != 200 or not body:
                raise RuntimeError(f"the upstream answered {response.status}")

    return post, session.close


async def _measure(make, host: str, port: int, requests: int) -> tuple[float, float]:
    post, close = await make(host, port)
    try:
        for _ in range(min(300, requests)):  # warm: the connection, the caches
            await post()
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(requests):
            await post()
        return (time.thread_time() - cpu) / requests * 1e6, (time.perf_counter() - wall) / requests * 1e6
    finally:
        closed = close()
        if asyncio.iscoroutine(closed):
            await closed


async def _run(host: str, port: int, requests: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {"aiohttp": [], "floor": []}
    for index in range(rounds):
        for name, make in (("aiohttp", _aiohttp_client), ("floor", _floor_client)):
            results[name].append(await _measure(make, host, port, requests))
            cpu, wall = results[name][-1]
            print(f"round {index + 1} {name:<8} cpu {cpu:6.0f} µs/req  wall {wall:6.0f} µs/req")
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000, help="per client and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import uvloop

    host, port = "127.0.0.1", free_port()
    with running_upstream(port, host):
        results = uvloop.run(_run(host, port, args.requests, args.rounds))
    medians = {
        name: (statistics.median(c for c, _ in rows), statistics.median(w for _, w in rows))
        for name, rows in results.items()
    }
    print(f"\nmedians over {args.rounds} rounds of {args.requests} sequential requests (µs per request)")
    print(f"{'client':<8} {'cpu':>6} {'wall':>6}")
    for name, (cpu, wall) in medians.items():
        print(f"{name:<8} {cpu:6.0f} {wall:6.0f}")
    (a_cpu, a_wall), (f_cpu, f_wall) = medians["aiohttp"], medians["floor"]
    print(f"aiohttp / floor: cpu {a_cpu / f_cpu:.2f}x, wall {a_wall / f_wall:.2f}x")


if __name__ == "__main__":
    main()
