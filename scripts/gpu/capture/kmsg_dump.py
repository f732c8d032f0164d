"""Dump raw /dev/kmsg records (PRI,SEQ,TS_USEC,FLAGS;MSG) without blocking."""
import os
import sys
fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
out = []
while True:
    try:
        rec = os.read(fd, 8192)
    except BlockingIOError:
        break
    except BrokenPipeError:
        out.append(b"#EPIPE\n")
        continue
    out.append(rec)
sys.stdout.buffer.write(b"".join(out))
