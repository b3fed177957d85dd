#!/usr/bin/env python3
"""bench/idle-hold.py — open N keep-alive connections to a proxy, send one request on
each, and hold them all idle until told to stop. Used by bench/idle to read how much
memory a proxy keeps per idle client connection.

Connections are opened one after another (so the proxy serves one request at a
time and its transient buffers never pile up), from source addresses 127.0.0.2,
127.0.0.3, ... in turn. Each gets `GET PATH HTTP/1.1` and its whole response must
be a 200 with a Content-Length body; the connection is then left open and silent.

Once all are held it prints `holding N` on stdout and waits until stdin reaches EOF
(or --hold seconds pass, or SIGTERM/SIGINT), then closes everything and exits.
Exit status 1 if any connection failed (the count and first error are printed).
"""

import argparse
import resource
import select
import signal
import socket
import ssl
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="HOST:PORT of the proxy")
    p.add_argument("--connections", type=int, default=8000)
    p.add_argument("--sources", type=int, default=8, help="127.0.0.2 .. 127.0.0.(1+N)")
    p.add_argument("--tls", action="store_true", help="TLS (any certificate accepted)")
    p.add_argument("--path", default="/")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per connection")
    p.add_argument("--hold", type=float, default=600.0, help="give up holding after S s")
    return p.parse_args()


def read_response(sock, deadline):
    """Reads one whole response; returns its status. Raises on anything else."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += recv_some(sock, deadline)
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        if name.strip().lower() == b"transfer-encoding":
            raise ValueError("chunked response; the origin must send Content-Length")
    if length is None:
        raise ValueError("response without Content-Length")
    while len(rest) < length:
        rest += recv_some(sock, deadline)
    if len(rest) > length:
        raise ValueError("more bytes than Content-Length")
    return status


def recv_some(sock, deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("response not complete in time")
    sock.settimeout(left)
    chunk = sock.recv(65536)
    if not chunk:
        raise ConnectionError("closed by the proxy")
    return chunk


def open_one(args, host, port, source, context):
    deadline = time.monotonic() + args.timeout
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        raw.bind((source, 0))
        raw.settimeout(args.timeout)
        raw.connect((host, port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = context.wrap_socket(raw, server_hostname="localhost") if context else raw
    except Exception:
        raw.close()
        raise
    try:
        request = f"GET {args.path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        sock.sendall(request)
        status = read_response(sock, deadline)
        if status != 200:
            raise ValueError(f"status {status}")
    except Exception:
        sock.close()
        raise
    return sock


def main():
    args = parse_args()
    host, _, port = args.target.rpartition(":")
    port = int(port)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.connections + 64 > hard:
        sys.exit(f"idle-hold: {args.connections} connections need more than the {hard} open files allowed")
    context = None
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    held, failed, first_error = [], 0, None
    started = time.monotonic()
    for i in range(args.connections):
        if stop:
            break
        source = f"127.0.0.{2 + i % max(1, args.sources)}"
        try:
            held.append(open_one(args, host, port, source, context))
        except Exception as error:  # counted, and the first one is reported
            failed += 1
            first_error = first_error or f"connection {i} from {source}: {error!r}"
    took = time.monotonic() - started
    print(f"holding {len(held)} failed {failed} seconds {took:.1f}", flush=True)
    if first_error:
        print(f"idle-hold: first error: {first_error}", file=sys.stderr, flush=True)
    end = time.monotonic() + args.hold
    while not stop and time.monotonic() < end:
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if ready and not sys.stdin.buffer.read1(4096):
            break
    for sock in held:
        sock.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
