import sys
print([(s.encoding, s.errors, s.line_buffering, s.write_through, type(s.buffer).__name__) for s in (sys.stdin, sys.stdout, sys.stderr)])
