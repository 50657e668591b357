import signal
print({s.name: str(signal.getsignal(s)) for s in sorted(signal.valid_signals()) if isinstance(s, signal.Signals)})
print([l for l in open('/proc/self/status') if l.startswith(('SigBlk', 'SigIgn', 'SigCgt', 'NoNewPrivs', 'Seccomp', 'Cap'))])
