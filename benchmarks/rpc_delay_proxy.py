"""A TCP proxy that delays every chunk by a set time, to measure what an RPC hop costs.

It sits between ``llama-completion --rpc 127.0.0.1:LISTEN`` and a ``ggml-rpc-server`` at
``--target``. Every chunk read from either side is forwarded ``--delay-ms`` after it arrived, in
order, without holding back the chunks behind it: the proxy adds a one-way latency (a round trip
costs twice the delay), not a per-message service time. Each direction of each connection has a
reader thread (stamps the chunk with its arrival time) and a writer thread (sleeps until the
stamp plus the delay, then sends). Threads rather than asyncio: ``time.sleep`` waits to the
microsecond, an epoll timeout only to the millisecond. ``TCP_NODELAY`` on both sockets, as
ggml-rpc sets it itself. Loopback addresses only::

    python benchmarks/rpc_delay_proxy.py --listen 50200 --target 127.0.0.1:50152 --delay-ms 2

``--echo-check N`` times N round trips through the proxy to a local echo server, without delay and
at ``--delay-ms``, which shows what the proxy itself adds (measured here: 0.06-0.09 ms at no delay,
2.18 / 4.21 / 10.23 ms at 1 / 2 / 5 ms, median of 50, on a 2-core VM).

On SIGTERM or SIGINT it writes one line of JSON to ``--stats`` (or stderr): connections, chunks
and bytes per direction, and the held time it achieved (mean, median, 90th percentile and max,
in ms, and the median of the chunks that found nothing queued ahead of them), so that a recording
can state the delay it really added.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import signal
import socket
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

CHUNK_BYTES = 1 << 20
MAX_DELAY_MS = 5.0
LOOPBACK = "127.0.0.1"
BUCKET_MS = 0.05
BUCKETS = 2000
"""Held-time histogram: 0.05 ms buckets up to 100 ms."""


@dataclass
class DirectionStats:
    """What one direction (client to server, or back) carried and how long its chunks were held.

    Held times go into fixed buckets of ``BUCKET_MS`` (the last one open-ended), so that the median
    is known without keeping every chunk. During a model load, chunks queue behind the bulk
    transfer and are held far longer than the delay; the chunks that found nothing queued ahead of
    them (``alone``: the messages of a decoded token) are counted apart too."""

    chunks: int = 0
    bytes: int = 0
    held_s_total: float = 0.0
    held_s_max: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    alone_buckets: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, size: int, held_s: float, alone: bool) -> None:
        bucket = min(int(held_s * 1e3 / BUCKET_MS), BUCKETS - 1)
        with self.lock:
            self.chunks += 1
            self.bytes += size
            self.held_s_total += held_s
            self.held_s_max = max(self.held_s_max, held_s)
            self.buckets[bucket] += 1
            if alone:
                self.alone_buckets[bucket] += 1


def _quantile_ms(buckets: list[int], fraction: float) -> float:
    """The upper edge of the bucket holding the ``fraction`` quantile of a held-time histogram."""
    total = sum(buckets)
    seen = 0
    for index, count in enumerate(buckets):
        seen += count
        if total and seen >= fraction * total:
            return (index + 1) * BUCKET_MS
    return 0.0 if not total else BUCKETS * BUCKET_MS

    def summary(self) -> dict[str, float | int]:
        with self.lock:
            mean = self.held_s_total / self.chunks if self.chunks else 0.0
            return {
                "chunks": self.chunks,
                "bytes": self.bytes,
                "held_ms_mean": round(mean * 1e3, 4),
                "held_ms_p50": round(_quantile_ms(self.buckets, 0.5), 4),
                "held_ms_p90": round(_quantile_ms(self.buckets, 0.9), 4),
                "held_ms_max": round(self.held_s_max * 1e3, 4),
                "alone_chunks": sum(self.alone_buckets),
                "alone_held_ms_p50": round(_quantile_ms(self.alone_buckets, 0.5), 4),
            }


@dataclass
class ProxyStats:
    """Counters of the whole proxy."""

    delay_ms: float
    connections: int = 0
    to_server: DirectionStats = field(default_factory=DirectionStats)
    to_client: DirectionStats = field(default_factory=DirectionStats)

    def summary(self) -> dict[str, object]:
        return {
            "delay_ms": self.delay_ms,
            "connections": self.connections,
            "to_server": self.to_server.summary(),
            "to_client": self.to_client.summary(),
        }


_END = b""
"""The queue item that tells a writer its reader saw the end of the stream."""


Pending = queue.SimpleQueue[tuple[float, bytes, bool]]
"""Chunks waiting to be sent: arrival time, bytes, whether nothing was queued ahead on arrival."""


def _read(source: socket.socket, pending: Pending) -> None:
    """Stamp every chunk read from ``source`` with its arrival time; ``_END`` at the end."""
    try:
        while chunk := source.recv(CHUNK_BYTES):
            pending.put((time.monotonic(), chunk, pending.empty()))
    except OSError:
        pass
    pending.put((time.monotonic(), _END, False))


def _write(
    target: socket.socket,
    pending: Pending,
    delay_s: float,
    stats: DirectionStats,
) -> None:
    """Send each chunk ``delay_s`` after its arrival, in arrival order; half-close at the end."""
    try:
        while True:
            arrived, chunk, alone = pending.get()
            wait = arrived + delay_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if chunk == _END:
                break
            target.sendall(chunk)
            stats.add(len(chunk), time.monotonic() - arrived, alone)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _pipe(
    source: socket.socket, target: socket.socket, delay_s: float, stats: DirectionStats
) -> list[threading.Thread]:
    pending: Pending = queue.SimpleQueue()
    threads = [
        threading.Thread(target=_read, args=(source, pending), daemon=True),
        threading.Thread(target=_write, args=(target, pending, delay_s, stats), daemon=True),
    ]
    for thread in threads:
        thread.start()
    return threads


def _serve_connection(client: socket.socket, target: tuple[str, int], delay_s: float, stats: ProxyStats) -> None:
    """Connect to the server and relay both directions until both ends have closed."""
    try:
        server = socket.create_connection(target)
    except OSError:
        client.close()
        return
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threads = _pipe(client, server, delay_s, stats.to_server) + _pipe(server, client, delay_s, stats.to_client)
    for thread in threads:
        thread.join()
    client.close()
    server.close()


def serve(listen_port: int, target: tuple[str, int], delay_ms: float) -> ProxyStats:
    """Listen on 127.0.0.1:``listen_port`` and relay every connection to ``target`` with the delay.
    Runs in daemon threads and returns the live counters once the port is listening."""
    if not 0.0 <= delay_ms <= MAX_DELAY_MS:
        raise SystemExit(f"--delay-ms must be between 0 and {MAX_DELAY_MS:g}, got {delay_ms:g}")
    if target[0] != LOOPBACK:
        raise SystemExit(f"--target must be a loopback address ({LOOPBACK}), got {target[0]}")
    stats = ProxyStats(delay_ms=delay_ms)
    listener = socket.create_server((LOOPBACK, listen_port), reuse_port=False)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            stats.connections += 1
            relay = (client, target, delay_ms / 1e3, stats)
            threading.Thread(target=_serve_connection, args=relay, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return stats


def _echo(listener: socket.socket) -> None:
    """Echo every byte back on each accepted connection (the far end of ``echo_round_trips``)."""
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(CHUNK_BYTES):
                conn.sendall(data)


def echo_round_trips(delay_ms: float, count: int, size: int = 64) -> list[float]:
    """Round-trip times (ms) of ``count`` ``size``-byte messages through the proxy to a local echo
    server: with a one-way delay D each should take 2 D plus the loopback and proxy overhead."""
    echo = socket.create_server((LOOPBACK, 0))
    threading.Thread(target=_echo, args=(echo,), daemon=True).start()
    with socket.create_server((LOOPBACK, 0)) as probe:
        listen = int(probe.getsockname()[1])
    serve(listen, (LOOPBACK, int(echo.getsockname()[1])), delay_ms)
    times = []
    with socket.create_connection((LOOPBACK, listen)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            began = time.perf_counter()
            client.sendall(b"x" * size)
            received = 0
            while received < size:
                received += len(client.recv(size))
            times.append((time.perf_counter() - began) * 1e3)
    return times


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=int, help="port to listen on (127.0.0.1)")
    parser.add_argument("--target", type=_endpoint, help="the rpc-server, 127.0.0.1:PORT")
    parser.add_argument("--delay-ms", type=float, default=0.0, help=f"one-way delay per chunk, 0-{MAX_DELAY_MS:g} ms")
    parser.add_argument("--stats", type=Path, help="file for the JSON counters written at exit (default stderr)")
    parser.add_argument(
        "--echo-check",
        type=int,
        metavar="N",
        help="time N round trips to a local echo server at no delay and at --delay-ms",
    )
    args = parser.parse_args()
    if args.echo_check:
        for delay in sorted({0.0, args.delay_ms}):
            times = sorted(echo_round_trips(delay, args.echo_check))
            print(
                f"delay {delay:g} ms: round trip median {statistics.median(times):.3f} ms, "
                f"min {times[0]:.3f}, max {times[-1]:.3f} ({len(times)} messages)"
            )
        return
    if args.listen is None or args.target is None:
        parser.error("--listen and --target are required (or --echo-check N)")
    stats = serve(args.listen, args.target, args.delay_ms)
    stop = threading.Event()

    def finish(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    print(f"listening on {LOOPBACK}:{args.listen} -> {args.target[0]}:{args.target[1]}", file=sys.stderr, flush=True)
    stop.wait()
    line = json.dumps(stats.summary())
    if args.stats is not None:
        args.stats.write_text(line + "\n")
    else:
        print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
