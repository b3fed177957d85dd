import socket, ssl, sys
def plain(payload, port=38010):
    s=socket.create_connection(("127.0.0.1",port)); s.settimeout(2); s.sendall(payload)
    try: r=s.recv(100)
    except Exception as e: r=repr(e).encode()
    s.close(); return r[:40]
def tls(payload):
    ctx=ssl.create_default_context(); ctx.check_hostname=False; ctx.verify_mode=ssl.CERT_NONE; ctx.set_alpn_protocols(["http/1.1"])
    s=ctx.wrap_socket(socket.create_connection(("127.0.0.1",38011)), server_hostname="localhost"); s.settimeout(2); s.sendall(payload)
    try: r=s.recv(100)
    except Exception as e: r=repr(e).encode()
    s.close(); return r[:40]
print("h2c-vs 4-token:", plain(b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n"))
print("h2c-vs garbage:", plain(b"HELLO\r\n\r\n"))
print("h2c-vs lowercase method:", plain(b"get / HTTP/1.1\r\nHost: x\r\n\r\n"))
print("tls-vs 4-token:", tls(b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n"))
print("tls-vs garbage:", tls(b"HELLO\r\n\r\n"))
print("plain http to tls port:", plain(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 38011))
