# The victim of the cross-run attack tests: it holds a secret input file (if
# given), its code and a marker in memory, records signals, and when told
# (SIGUSR2, or after 20 s) reports what of it is still intact.
import os, signal, time

marker = bytearray(b'VICTIM' + b'-MARKER-' + b'A' * 16)  # never contiguous in the source
got = []
done = []
signal.signal(signal.SIGUSR1, lambda *a: got.append('usr1'))
signal.signal(signal.SIGUSR2, lambda *a: done.append(1))
code = open(__file__).read()
end = time.time() + 20
while not done and time.time() < end:
    time.sleep(0.01)
if os.path.exists('secret.txt'):
    print('secret', open('secret.txt').read())
print('code', 'intact' if open(__file__).read() == code else 'changed')
print('memory', bytes(marker[:14]).decode(errors='replace'))
print('signals', got)
