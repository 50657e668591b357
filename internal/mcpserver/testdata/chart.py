# Writes a 1x1 PNG (with the standard library only: the local backend's
# python3 may lack matplotlib) and a CSV, for the tests of sandbox mcp to
# ask back as outputs.
import os
import struct
import zlib


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
os.makedirs("out", exist_ok=True)
with open("out/chart.png", "wb") as f:
    f.write(png)
with open("out/stats.csv", "w") as f:
    f.write("a,b\n1,2\n")
print("wrote", len(png), "bytes of PNG")
