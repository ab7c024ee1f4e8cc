"""Binary-safe edits of Redis values for tests/remote_cache.sh (redis-cli mangles binary values in shell
variables): a minimal RESP client over a unix socket.

usage: remote_cache_resp.py SOCKET tamper KEY | truncate KEY | swap KEY1 KEY2
"""
import socket
import sys


def command(sock, *args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)
    return read_reply(sock.makefile("rb"))


def read_reply(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b":"):
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    raise RuntimeError(f"unexpected reply {line!r}")


def main():
    path, action, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    if action == "tamper":  # flip one payload byte near the end (inside the signed entry)
        v = bytearray(command(s, "GET", keys[0]))
        v[-5] ^= 0x40
        command(s, "SET", keys[0], bytes(v))
    elif action == "truncate":
        v = command(s, "GET", keys[0])
        command(s, "SET", keys[0], v[: len(v) // 2])
    elif action == "swap":  # two valid entries, each under the other's key
        a, b = command(s, "GET", keys[0]), command(s, "GET", keys[1])
        command(s, "SET", keys[0], b)
        command(s, "SET", keys[1], a)
    else:
        sys.exit(f"unknown action {action}")


if __name__ == "__main__":
    main()
