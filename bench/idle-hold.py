#!/usr/bin/env python3
"""bench/idle-hold.py — open N keep-alive connections to a proxy, send one request on
each, and hold them all idle until told to stop. Used by bench/idle to read how much
memory a proxy keeps per idle client connection.

Connections are opened one after another (so the proxy serves one request at a
time and its transient buffers never pile up), from source addresses 127.0.0.2,
127.0.0.3, ... in turn. Each gets `GET PATH HTTP/1.1` and its whole response must
be a 200 with a Content-Length body; the connection is then left open and silent.

With --h2 each connection speaks HTTP/2 over TLS (ALPN `h2`, which the proxy must
choose): the client preface and an empty SETTINGS, the proxy's SETTINGS acknowledged,
one GET on stream 1 whose answer must be `:status 200` and end its stream; the
connection is then held open and silent in the same way.

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
    p.add_argument("--h2", action="store_true", help="HTTP/2 over TLS (ALPN h2; implies --tls)")
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


# HTTP/2 frame types and flags (RFC 9113 §6) this client sends or reads.
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(index, value):
    """A header field without indexing, its name from the static table (RFC 7541 §6.2.2),
    its value as a plain string (no Huffman): enough for a request this client makes."""
    value = value.encode()
    assert index < 15 and len(value) < 127
    return bytes([index, len(value)]) + value


def h2_request(path, authority):
    # :method GET (static 2), :scheme https (7), then :path and :authority as literals.
    block = bytes([0x82, 0x87]) + hpack_literal(4, path) + hpack_literal(1, authority)
    return PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_STREAM | END_HEADERS, 1, block)


def h2_exchange(sock, deadline):
    """Reads frames until stream 1 ends; acknowledges the proxy's SETTINGS and answers its
    PINGs. Returns the answer's status (from an indexed `:status`, static entries 8–14)."""
    data, status = b"", None
    while True:
        while len(data) < 9 or len(data) < 9 + int.from_bytes(data[:3], "big"):
            data += recv_some(sock, deadline)
        length = int.from_bytes(data[:3], "big")
        kind, flags, stream = data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
        payload, data = data[9:9 + length], data[9 + length:]
        if kind == SETTINGS and not flags & ACK:
            sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            raise ConnectionError("GOAWAY from the proxy")
        elif kind == RST_STREAM and stream == 1:
            raise ConnectionError("stream 1 reset by the proxy")
        elif kind == HEADERS and stream == 1 and status is None:
            start = 0
            if flags & PADDED:
                start += 1
            if flags & PRIORITY:
                start += 5
            # A dynamic table size update (RFC 7541 §6.3, 001xxxxx) may come first.
            while start < len(payload) and payload[start] & 0xE0 == 0x20:
                start += 1
                if payload[start - 1] & 0x1F == 0x1F:
                    while start < len(payload) and payload[start] & 0x80:
                        start += 1
                    start += 1
            first = payload[start] if len(payload) > start else 0
            codes = {0x88: 200, 0x89: 204, 0x8A: 206, 0x8B: 304, 0x8C: 400, 0x8D: 404, 0x8E: 500}
            status = codes.get(first, 0)
            if flags & END_STREAM:
                return status
        elif kind in (DATA, HEADERS) and stream == 1 and flags & END_STREAM:
            return status


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
        if args.h2:
            if sock.selected_alpn_protocol() != "h2":
                raise ValueError(f"ALPN chose {sock.selected_alpn_protocol()!r}, not h2")
            sock.sendall(h2_request(args.path, f"{host}:{port}"))
            status = h2_exchange(sock, deadline)
            if status != 200:
                raise ValueError(f"status {status} (0: not an indexed 2xx-5xx)")
            return sock
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
    if args.tls or args.h2:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if args.h2:
            context.set_alpn_protocols(["h2"])
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
