#!/usr/bin/env python3
# rping_echoes.py CLIENT_OUT SERVER_OUT N: exit 0 when `rping -v` printed N echoes on the
# client, each the server's line and rping's own pattern ("rdma-ping-I: " then characters
# from 'A'+I%58 cycling through 'A'..'z', up to the 64-byte buffer's last byte); otherwise
# say what differs and exit 1. Used by test_rdmacm_utils.sh and test_cm_ibcm.sh.
import sys

cli = [l[len("ping data: "):] for l in open(sys.argv[1], errors="replace").read().splitlines()
       if l.startswith("ping data: ")]
srv = [l[len("server ping data: "):] for l in open(sys.argv[2], errors="replace").read().splitlines()
       if l.startswith("server ping data: ")]
n = int(sys.argv[3])


def pattern(i):
    s = "rdma-ping-%d: " % i
    c = 65 + i % 58
    while len(s) < 63:
        s += chr(c)
        c = 65 if c >= 122 else c + 1
    return s


bad = [i for i in range(n) if i >= len(cli) or cli[i] != pattern(i)]
if len(cli) != n or len(srv) != n or bad or cli != srv:
    print("client lines %d, server lines %d, first bad iteration %s, client == server: %s"
          % (len(cli), len(srv), bad[:1], cli == srv))
    sys.exit(1)
