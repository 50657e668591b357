# The attacker of the cross-run attack tests, told the victim's pid as the
# host sees it (VICTIM_PID is replaced before the run): it tries to read and
# rewrite the victim's input file and code, to write into its memory, and to
# signal it, and prints one line per attempt: NAME ok|blocked DETAIL.
import os, re, signal

P = VICTIM_PID


def attempt(name, f):
    try:
        print(name, 'ok', f())
    except Exception as e:
        print(name, 'blocked', type(e).__name__, e)


def read_file():
    return open(f'/proc/{P}/cwd/secret.txt').read()


def write_file():
    open(f'/proc/{P}/cwd/secret.txt', 'w').write('PWNED')
    return 'written'


def regions():
    """Yields the start and the bytes of each writable mapping of the victim."""
    with open(f'/proc/{P}/mem', 'rb', buffering=0) as m:
        for line in open(f'/proc/{P}/maps'):
            f = line.split()
            if 'rw' not in f[1]:
                continue
            lo, hi = (int(x, 16) for x in f[0].split('-'))
            if hi - lo > 256 << 20:
                continue
            try:
                m.seek(lo)
                yield lo, m.read(hi - lo)
            except OSError:
                continue


def write_code():
    args = open(f'/proc/{P}/cmdline', 'rb').read().split(b'\0')
    paths = [a.decode() for a in args if a.endswith(b'.py')]
    if not paths:
        # The code came on a socket and no command line names its file:
        # the victim's memory does.
        paths = [x.decode() for _, data in regions() for x in re.findall(rb'/[\w/.-]*sandbox-snippet-\d+\.py', data)]
    open(f'/proc/{P}/root' + paths[0], 'w').write('print("PWNED")\n')
    return paths[0]


def write_mem():
    n = 0
    with open(f'/proc/{P}/mem', 'r+b', buffering=0) as m:
        for lo, data in regions():
            i = data.find(b'VICTIM-MARKER-AAAA')
            while i >= 0:
                m.seek(lo + i)
                m.write(b'PWNED!')
                n += 1
                i = data.find(b'VICTIM-MARKER-AAAA', i + 1)
    if not n:
        raise LookupError('marker not found')
    return n


def signal_it():
    os.kill(P, signal.SIGUSR1)
    return 'sent'


attempt('read-file', read_file)
attempt('write-file', write_file)
attempt('write-code', write_code)
attempt('write-memory', write_mem)
attempt('signal', signal_it)
