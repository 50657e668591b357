import os, sys
print(repr(sys.stdin.read()), os.read(0, 10), sys.stdin.isatty())
